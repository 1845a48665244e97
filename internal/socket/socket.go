package socket

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MaxPathLen is the longest socket path the kernel accepts (sun_path is 108
// bytes including the terminating NUL).
const MaxPathLen = 107

// ErrInUse is returned when another live process answers on the socket path.
var ErrInUse = errors.New("socket is in use by a live process")

type options struct {
	mode  fs.FileMode
	group string
	peers Peers
}

// Option changes how Listen creates the socket.
type Option func(*options)

// WithMode sets the socket's permission bits (default 0660).
func WithMode(m fs.FileMode) Option { return func(o *options) { o.mode = m } }

// WithGroup makes the socket owned by the named (or numeric) group, so members
// of that group can connect.
func WithGroup(g string) Option { return func(o *options) { o.group = g } }

// WithPeers checks every connection's peer credentials against p: the
// listener's connections are *PeerConn, and the server must refuse the ones
// whose Refused is set (grpcserver does).
func WithPeers(p Peers) Option { return func(o *options) { o.peers = p } }

// Endpoint turns a socket path into the unix:// target gRPC clients dial.
func Endpoint(path string) string { return "unix://" + path }

// PathFromEndpoint accepts "unix:///path", "unix:/path" or a bare path and returns the path.
func PathFromEndpoint(ep string) (string, error) {
	switch {
	case strings.HasPrefix(ep, "unix://"):
		ep = strings.TrimPrefix(ep, "unix://")
	case strings.HasPrefix(ep, "unix:"):
		ep = strings.TrimPrefix(ep, "unix:")
	case strings.Contains(ep, "://"):
		return "", fmt.Errorf("endpoint %q: only unix:// endpoints are supported", ep)
	}
	if ep == "" {
		return "", errors.New("empty endpoint")
	}
	return ep, nil
}

// CheckPath reports a path the kernel would refuse as a socket address.
func CheckPath(path string) error {
	if path == "" {
		return errors.New("socket path is empty")
	}
	if len(path) > MaxPathLen {
		return fmt.Errorf("socket path %q is %d bytes, longer than the %d the kernel allows; use a shorter run dir", path, len(path), MaxPathLen)
	}
	return nil
}

// Listen creates a unix socket at path and listens on it. A leftover socket
// nobody answers on is removed first; one a live process answers on is refused
// with ErrInUse; any other kind of file at path is refused.
func Listen(path string, opts ...Option) (net.Listener, error) {
	o := options{mode: 0o660}
	for _, opt := range opts {
		opt(&o)
	}
	if err := CheckPath(path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if err := CheckDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	// The umask keeps the socket private between bind and chmod.
	old := syscall.Umask(0o177)
	lis, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if ul, ok := lis.(*net.UnixListener); ok {
		ul.SetUnlinkOnClose(true)
	}
	if err := os.Chmod(path, o.mode); err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	if o.group != "" {
		gid, err := lookupGroup(o.group)
		if err != nil {
			_ = lis.Close()
			return nil, err
		}
		if err := os.Chown(path, -1, gid); err != nil {
			_ = lis.Close()
			return nil, fmt.Errorf("chown %s to group %s: %w", path, o.group, err)
		}
	}
	return CheckPeers(lis, o.peers), nil
}

// CheckDir refuses a socket directory others could use to put their own
// socket in the place of ours: one anyone may write to, or one owned by a
// user other than root and this process's.
func CheckDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("socket dir %s is not a directory", dir)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("socket dir %s is writable by everyone (mode %v): anyone could replace the sockets; use a directory of its own, e.g. mode 0750", dir, fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("socket dir %s is owned by uid %d, neither root nor this process (uid %d): its owner could replace the sockets", dir, st.Uid, os.Geteuid())
	}
	return nil
}

// GroupID resolves a group name or number.
func GroupID(g string) (int, error) { return lookupGroup(g) }

func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
	}
	if Alive(path) {
		return fmt.Errorf("%s: %w", path, ErrInUse)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	return nil
}

// Alive reports whether a process accepts connections on the socket at path.
func Alive(path string) bool {
	c, err := net.DialTimeout("unix", path, 500*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func lookupGroup(g string) (int, error) {
	if id, err := strconv.Atoi(g); err == nil {
		return id, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}
