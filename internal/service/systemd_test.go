package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
)

// slowService becomes ready only when the test says so, then runs until told
// to stop.
type slowService struct {
	cfg   Common
	ready chan struct{}
	stop  chan struct{}
}

func (s *slowService) Name() string         { return "podconfig" }
func (s *slowService) Config() CommonConfig { return &s.cfg }
func (s *slowService) Register(*Env) error  { return nil }
func (s *slowService) Run(ctx context.Context, env *Env) error {
	select {
	case <-s.ready:
	case <-ctx.Done():
		return nil
	}
	env.Ready()
	select {
	case <-s.stop:
	case <-ctx.Done():
	}
	return nil
}

// TestNotifyReadyOnlyWhenServing runs the skeleton under a NOTIFY_SOCKET with
// a service that takes its time: no READY=1 may reach systemd while health
// still says NOT_SERVING, READY=1 follows Ready, and STOPPING=1 comes when
// the service ends.
func TestNotifyReadyOnlyWhenServing(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "svn")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	notify := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", notify)
	t.Setenv("WATCHDOG_USEC", "")

	svc := &slowService{cfg: DefaultCommon(), ready: make(chan struct{}), stop: make(chan struct{})}
	exited := make(chan int, 1)
	go func() {
		exited <- Execute(svc, []string{"--run-dir", dir, "--data-dir", dir, "--node-name", "n", "--shutdown-timeout", "5s"})
	}()

	cc, err := grpcclient.Dial(filepath.Join(dir, "podconfig.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Health answers NOT_SERVING while Run has not called Ready...
	testenv.Eventually(t, "health answers NOT_SERVING", time.Minute, func() error {
		st, err := grpcclient.Check(ctx, cc, "")
		if err == nil && st != healthpb.HealthCheckResponse_NOT_SERVING {
			err = fmt.Errorf("health %v", st)
		}
		return err
	})
	// ...and systemd has heard nothing: no datagram is queued on the socket
	// (asked without waiting; an early READY=1 that came later still shows
	// below, as a first message sent before Ready or a second READY=1).
	if msg := queued(t, conn); msg != "" {
		t.Fatalf("notification %q before the service was ready", msg)
	}

	close(svc.ready)
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	n, err := conn.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "READY=1") {
		t.Fatalf("after Ready: %q, %v; want READY=1", buf[:n], err)
	}
	if st, err := grpcclient.Check(ctx, cc, ""); err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after READY=1: %v %v", st, err)
	}

	close(svc.stop)
	n, err = conn.Read(buf)
	if err != nil || !strings.HasPrefix(string(buf[:n]), "STOPPING=1") {
		t.Fatalf("at shutdown: %q, %v; want STOPPING=1", buf[:n], err)
	}
	select {
	case code := <-exited:
		if code != 0 {
			t.Fatalf("exit status %d", code)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Execute did not return")
	}
	if msg := queued(t, conn); msg != "" {
		t.Fatalf("notification %q after STOPPING=1; want READY=1 and STOPPING=1 only", msg)
	}
}

// queued returns the datagram waiting on conn, "" when none is, without
// waiting for one.
func queued(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var n int
	var rerr error
	if err := raw.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if errors.Is(rerr, unix.EAGAIN) {
		return ""
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	return string(buf[:n])
}
