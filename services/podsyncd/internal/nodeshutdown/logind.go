package nodeshutdown

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/microlet/microlet/internal/statefile"
)

// D-Bus names of logind and of systemd's manager (to reload logind).
const (
	LogindService   = "org.freedesktop.login1"
	LogindPath      = dbus.ObjectPath("/org/freedesktop/login1")
	LogindInterface = "org.freedesktop.login1.Manager"

	SystemdService   = "org.freedesktop.systemd1"
	SystemdPath      = dbus.ObjectPath("/org/freedesktop/systemd1")
	SystemdInterface = "org.freedesktop.systemd1.Manager"

	// DefaultDropIn is where the kubelet writes its logind override.
	DefaultDropIn = "/etc/systemd/logind.conf.d/99-kubelet.conf"
)

// Logind is a connection to systemd-logind on a system bus.
type Logind struct {
	conn *dbus.Conn
}

// DialLogind connects to the system bus at address ("" is the system bus:
// $DBUS_SYSTEM_BUS_ADDRESS or /var/run/dbus/system_bus_socket). The
// connection is private, so closing it never affects another user.
func DialLogind(address string) (*Logind, error) {
	var (
		conn *dbus.Conn
		err  error
	)
	if address == "" {
		conn, err = dbus.ConnectSystemBus()
	} else {
		conn, err = dbus.Connect(address)
	}
	if err != nil {
		return nil, err
	}
	return &Logind{conn: conn}, nil
}

// Close closes the connection; the signal channel of Watch is closed.
func (l *Logind) Close() error { return l.conn.Close() }

// InhibitDelayMax reads logind's InhibitDelayMaxUSec: the longest a delay
// lock may hold a shutdown back.
func (l *Logind) InhibitDelayMax() (time.Duration, error) {
	v, err := l.conn.Object(LogindService, LogindPath).GetProperty(LogindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("reading logind's InhibitDelayMaxUSec: %w", err)
	}
	us, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("logind's InhibitDelayMaxUSec is %T, not uint64", v.Value())
	}
	return time.Duration(us) * time.Microsecond, nil
}

// InhibitLock is a delay lock: an open file descriptor logind watches;
// closing it lets the shutdown go on.
type InhibitLock int

// Inhibit takes a "delay" inhibitor lock on shutdown, as the kubelet does.
func (l *Logind) Inhibit() (InhibitLock, error) {
	var fd dbus.UnixFD
	err := l.conn.Object(LogindService, LogindPath).Call(LogindInterface+".Inhibit", 0,
		"shutdown", "microlet", "microlet (the kubelet) needs time to stop pods before the node shuts down", "delay").Store(&fd)
	if err != nil {
		return -1, fmt.Errorf("taking a logind inhibitor lock: %w", err)
	}
	if fd < 0 {
		return -1, errors.New("taking a logind inhibitor lock: no file descriptor came back")
	}
	return InhibitLock(fd), nil
}

// Release closes the lock's descriptor.
func (lock InhibitLock) Release() error {
	if lock < 0 {
		return nil
	}
	if err := syscall.Close(int(lock)); err != nil {
		return fmt.Errorf("releasing the logind inhibitor lock: %w", err)
	}
	return nil
}

// ReloadLogind has systemd send logind SIGHUP, so it re-reads its
// configuration (the kubelet's ReloadLogindConf). The reload is
// asynchronous.
func (l *Logind) ReloadLogind() error {
	call := l.conn.Object(SystemdService, SystemdPath).Call(SystemdInterface+".KillUnit", 0,
		"systemd-logind.service", "all", int32(syscall.SIGHUP))
	if call.Err != nil {
		return fmt.Errorf("asking systemd to reload logind: %w", call.Err)
	}
	return nil
}

// Watch subscribes to PrepareForShutdown; the channel carries its argument
// (true: shutting down, false: cancelled) and is closed when the connection
// ends.
func (l *Logind) Watch() (<-chan bool, error) {
	if err := l.conn.AddMatchSignal(dbus.WithMatchInterface(LogindInterface), dbus.WithMatchMember("PrepareForShutdown"),
		dbus.WithMatchObjectPath(LogindPath)); err != nil {
		return nil, fmt.Errorf("subscribing to logind's PrepareForShutdown: %w", err)
	}
	sigs := make(chan *dbus.Signal, 4)
	l.conn.Signal(sigs)
	out := make(chan bool, 1)
	go func() {
		defer close(out)
		for s := range sigs {
			if s == nil || s.Name != LogindInterface+".PrepareForShutdown" || len(s.Body) == 0 {
				continue
			}
			if v, ok := s.Body[0].(bool); ok {
				out <- v
			}
		}
	}()
	return out, nil
}

// WriteDropIn writes a logind drop-in raising InhibitDelayMaxSec to delay
// (whole seconds, rounded), the file the kubelet writes, crash-safely
// (statefile: logind never reads a half-written drop-in).
func WriteDropIn(path string, delay time.Duration) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("logind drop-in directory: %w", err)
	}
	body := fmt.Sprintf("# Written by microlet (the kubelet's logind override): pods get time to stop before shutdown.\n[Login]\nInhibitDelayMaxSec=%.0f\n", delay.Seconds())
	if err := statefile.WriteFile(path, []byte(body), 0o644); err != nil { //nolint:gosec // logind reads it
		return fmt.Errorf("logind drop-in: %w", err)
	}
	return nil
}
