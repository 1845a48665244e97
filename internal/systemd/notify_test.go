package systemd

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// notifySocket listens on a unixgram socket the way systemd's NOTIFY_SOCKET
// does and points the environment at it.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "sdn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return conn
}

// next returns the next datagram, failing the test after a generous deadline.
func next(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	if err := conn.SetReadDeadline(time.Now().Add(60 * time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestNotifierDisabledWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := NewNotifier(slog.Default(), nil)
	if n != nil {
		t.Fatalf("NewNotifier without NOTIFY_SOCKET = %v, want nil", n)
	}
	// The nil notifier is safe to use, so the skeleton needs no checks.
	n.Ready()
	n.Stopping()
	if n.WatchdogInterval() != 0 {
		t.Fatal("nil notifier has a watchdog interval")
	}
}

func TestNotifierReadyWatchdogStopping(t *testing.T) {
	conn := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", "")
	var checks atomic.Int32
	n := NewNotifier(slog.Default(), func(context.Context) error { checks.Add(1); return nil })
	if got := n.WatchdogInterval(); got != 100*time.Millisecond {
		t.Fatalf("watchdog interval = %s, want half of WATCHDOG_USEC (100ms)", got)
	}
	n.Ready()
	n.Ready() // a second Ready must not send a second READY=1
	if got := next(t, conn); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("first notification = %q, want READY=1", got)
	}
	for range 3 {
		if got := next(t, conn); got != "WATCHDOG=1" {
			t.Fatalf("notification = %q, want WATCHDOG=1", got)
		}
	}
	if checks.Load() < 3 {
		t.Fatalf("%d health checks for 3 pings; every ping must follow a passing check", checks.Load())
	}
	n.Stopping()
	// Pings may have been in flight before Stopping; STOPPING=1 must come and
	// nothing after it.
	for {
		got := next(t, conn)
		if got == "WATCHDOG=1" {
			continue
		}
		if !strings.HasPrefix(got, "STOPPING=1") {
			t.Fatalf("notification = %q, want STOPPING=1", got)
		}
		break
	}
	n.Stopping()
	n.Ready() // after stopping, Ready does nothing
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if m, err := conn.Read(make([]byte, 64)); err == nil {
		t.Fatalf("notification after STOPPING=1 (%d bytes)", m)
	}
}

func TestNotifierSkipsPingWhenUnhealthy(t *testing.T) {
	conn := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", "")
	failed := make(chan struct{}, 100)
	n := NewNotifier(slog.Default(), func(context.Context) error {
		failed <- struct{}{}
		return errors.New("not serving")
	})
	n.Ready()
	if got := next(t, conn); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("first notification = %q, want READY=1", got)
	}
	// The ping follows its check in the same goroutine, so once three checks
	// have failed any ping they allowed would already be queued.
	for range 3 {
		select {
		case <-failed:
		case <-time.After(60 * time.Second):
			t.Fatal("the watchdog never asked the health check")
		}
	}
	n.Stopping()
	if got := next(t, conn); !strings.HasPrefix(got, "STOPPING=1") {
		t.Fatalf("notification = %q: a failing health check must suppress WATCHDOG=1", got)
	}
}

func TestNotifierWatchdogForAnotherPID(t *testing.T) {
	notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", "1")
	if n := NewNotifier(slog.Default(), nil); n.WatchdogInterval() != 0 {
		t.Fatal("the watchdog of another PID must not be pinged")
	}
}
