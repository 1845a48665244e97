package logind

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"

	"github.com/microlet/microlet/internal/testenv"
)

// Names logind and systemd use on the bus.
const (
	service   = "org.freedesktop.login1"
	path      = dbus.ObjectPath("/org/freedesktop/login1")
	iface     = "org.freedesktop.login1.Manager"
	sdService = "org.freedesktop.systemd1"
	sdPath    = dbus.ObjectPath("/org/freedesktop/systemd1")
	sdIface   = "org.freedesktop.systemd1.Manager"
)

// Bus is a private dbus-daemon.
type Bus struct {
	// Address is the bus's D-Bus address (unix:path=...).
	Address string
	proc    *testenv.Process
}

// StartBus starts dbus-daemon on a socket in a fresh directory; it is
// stopped when the test ends. Without /usr/bin/dbus-daemon the test is
// skipped (or fails under testenv.Required).
func StartBus(t testing.TB) *Bus {
	t.Helper()
	return StartBusAt(t, filepath.Join(testenv.ShortDir(t, "dbus"), "bus"))
}

// StartBusAt starts dbus-daemon listening on the unix socket sock (whose
// directory must exist), for tests of a client that came up before its bus.
func StartBusAt(t testing.TB, sock string) *Bus {
	t.Helper()
	daemon, err := findDaemon()
	if err != nil {
		testenv.RequireOrSkip(t, "dbus-daemon not found (Debian package dbus-daemon): %v", err)
	}
	conf := sock + ".conf"
	// A bus that lets every local user own and call anything: the test's
	// processes are the only clients.
	if err := os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path=`+sock+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="method_return"/>
    <allow send_type="error"/>
    <allow send_type="signal"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
</busconfig>
`), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &Bus{Address: "unix:path=" + sock}
	b.proc = testenv.StartProcess(t, "dbus-daemon", daemon, "--config-file="+conf, "--nofork", "--nopidfile", "--nosyslog")
	testenv.Eventually(t, "dbus-daemon answers on "+sock, 30*time.Second, func() error {
		c, err := dbus.Connect(b.Address)
		if err != nil {
			return err
		}
		return c.Close()
	})
	return b
}

// Stop stops the daemon: every connection to it ends.
func (b *Bus) Stop() { b.proc.Stop(10 * time.Second) }

func findDaemon() (string, error) {
	for _, p := range []string{"/usr/bin/dbus-daemon", "/bin/dbus-daemon"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

// handOverLimit bounds how long the stand-in looks for its descriptor in
// the client before closing its own copy.
const handOverLimit = 500 * time.Millisecond

// Lock is one inhibitor lock handed out by Inhibit.
type Lock struct {
	What, Who, Why, Mode string
	// PID is the process that asked for it.
	PID      int
	r, w     *os.File
	released chan struct{}
}

// Released is closed once every copy of the lock's descriptor in the client
// is closed: the read end of its pipe saw end of file.
func (l *Lock) Released() <-chan struct{} { return l.released }

// IsReleased reports whether Released is closed.
func (l *Lock) IsReleased() bool {
	select {
	case <-l.released:
		return true
	default:
		return false
	}
}

// Logind is the stand-in on a Bus.
type Logind struct {
	conn   *dbus.Conn
	props  *prop.Properties
	dropIn string

	mu      sync.Mutex
	locks   []*Lock
	reloads int
	changed chan struct{}
}

// Start exports the stand-in on bus with InhibitDelayMaxUSec set to
// delayMax; dropIn is the file its reload reads.
func Start(t testing.TB, bus *Bus, dropIn string, delayMax time.Duration) *Logind {
	t.Helper()
	conn, err := dbus.Connect(bus.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	l := &Logind{conn: conn, dropIn: dropIn, changed: make(chan struct{})}
	for _, name := range []string{service, sdService} {
		reply, err := conn.RequestName(name, dbus.NameFlagDoNotQueue)
		if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
			t.Fatalf("owning %s on the test bus: reply %v, %v", name, reply, err)
		}
	}
	if err := conn.ExportMethodTable(map[string]any{"Inhibit": l.inhibit}, path, iface); err != nil {
		t.Fatal(err)
	}
	if err := conn.ExportMethodTable(map[string]any{"KillUnit": l.killUnit}, sdPath, sdIface); err != nil {
		t.Fatal(err)
	}
	l.props, err = prop.Export(conn, path, prop.Map{iface: {
		"InhibitDelayMaxUSec": {Value: uint64(delayMax / time.Microsecond), Emit: prop.EmitFalse},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, lk := range l.locks {
			_ = lk.r.Close()
		}
	})
	return l
}

// inhibit hands out a lock: the write end of a fresh pipe. The stand-in's
// own copy is closed once the client holds the descriptor, so the read end
// sees end of file exactly when the client closes it.
func (l *Logind) inhibit(sender dbus.Sender, what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	var pid uint32
	if err := l.conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixProcessID", 0, string(sender)).Store(&pid); err != nil {
		return -1, dbus.MakeFailedError(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return -1, dbus.MakeFailedError(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		return -1, dbus.MakeFailedError(err)
	}
	lk := &Lock{What: what, Who: who, Why: why, Mode: mode, PID: int(pid), r: r, w: w, released: make(chan struct{})}
	fd := dbus.UnixFD(w.Fd()) // before handOver may close w
	go l.handOver(lk, st.Ino, int(r.Fd()), int(fd))
	l.mu.Lock()
	l.locks = append(l.locks, lk)
	l.broadcast()
	l.mu.Unlock()
	return fd, nil
}

// handOver closes the stand-in's write end once the client holds the
// descriptor, then waits for end of file on the read end. godbus sends the
// reply (and the descriptor) right after inhibit returns, and the stand-in
// cannot hook in after that send, so it looks for the pipe in the client's
// /proc/<pid>/fd; a client that already closed it again is covered by
// giving up the look after handOverLimit (a reply still unsent by then
// fails with EBADF and the client retries: never a false "released").
func (l *Logind) handOver(lk *Lock, ino uint64, rfd, wfd int) {
	target := fmt.Sprintf("pipe:[%d]", ino)
	own := map[string]bool{strconv.Itoa(rfd): true, strconv.Itoa(wfd): true}
	deadline := time.Now().Add(handOverLimit)
	for time.Now().Before(deadline) && !holds(lk.PID, target, own) {
		time.Sleep(2 * time.Millisecond)
	}
	_ = lk.w.Close()
	buf := make([]byte, 1)
	for {
		if _, err := lk.r.Read(buf); err != nil {
			break
		}
	}
	close(lk.released)
	l.mu.Lock()
	l.broadcast()
	l.mu.Unlock()
}

// holds reports whether pid has a descriptor on target other than ours (in
// the same process the stand-in's own ends are excluded).
func holds(pid int, target string, own map[string]bool) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	self := pid == os.Getpid()
	for _, e := range ents {
		if self && own[e.Name()] {
			continue
		}
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && link == target {
			return true
		}
	}
	return false
}

// killUnit is systemd's KillUnit: SIGHUP to systemd-logind.service reloads
// the stand-in's InhibitDelayMaxSec from the drop-in.
func (l *Logind) killUnit(unit, who string, signal int32) *dbus.Error {
	if unit != "systemd-logind.service" || syscall.Signal(signal) != syscall.SIGHUP {
		return dbus.MakeFailedError(fmt.Errorf("stand-in only reloads systemd-logind.service (got %s, signal %d)", unit, signal))
	}
	sec, err := readDelay(l.dropIn)
	if err != nil {
		return dbus.MakeFailedError(err)
	}
	// SetMust: the property is read-only for clients, not for logind.
	l.props.SetMust(iface, "InhibitDelayMaxUSec", uint64(sec)*uint64(time.Second/time.Microsecond))
	l.mu.Lock()
	l.reloads++
	l.broadcast()
	l.mu.Unlock()
	return nil
}

// readDelay reads InhibitDelayMaxSec from the [Login] section of a drop-in.
func readDelay(file string) (int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Login]" && strings.HasPrefix(line, "InhibitDelayMaxSec="):
			return strconv.ParseInt(strings.TrimPrefix(line, "InhibitDelayMaxSec="), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no InhibitDelayMaxSec in [Login]", file)
}

// broadcast wakes waiters; l.mu is held.
func (l *Logind) broadcast() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// InhibitDelayMax is the property's current value.
func (l *Logind) InhibitDelayMax() time.Duration {
	v, err := l.props.Get(iface, "InhibitDelayMaxUSec")
	if err != nil {
		return 0
	}
	us, _ := v.Value().(uint64)
	return time.Duration(us) * time.Microsecond
}

// Reloads counts KillUnit reloads.
func (l *Logind) Reloads() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reloads
}

// Locks returns the locks handed out so far, oldest first.
func (l *Logind) Locks() []*Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Lock(nil), l.locks...)
}

// WaitLock waits until the n-th lock (1-based) was handed out and returns it.
func (l *Logind) WaitLock(t testing.TB, n int, limit time.Duration) *Lock {
	t.Helper()
	deadline := time.After(limit)
	for {
		l.mu.Lock()
		if len(l.locks) >= n {
			lk := l.locks[n-1]
			l.mu.Unlock()
			return lk
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("logind stand-in: lock %d not asked for within %s (%d so far)", n, limit, len(l.Locks()))
		}
	}
}

// PrepareForShutdown emits the signal as logind does before (true) and on
// cancelling (false) a shutdown.
func (l *Logind) PrepareForShutdown(t testing.TB, active bool) {
	t.Helper()
	if err := l.conn.Emit(path, iface+".PrepareForShutdown", active); err != nil {
		t.Fatal(err)
	}
}
