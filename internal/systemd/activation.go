package systemd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
)

// Activated reports whether systemd (or anything speaking its protocol) handed
// this process listening sockets: LISTEN_FDS is set and LISTEN_PID is ours.
func Activated() bool {
	return os.Getenv("LISTEN_FDS") != "" && os.Getenv("LISTEN_PID") == fmt.Sprint(os.Getpid())
}

// Listener returns the socket-activated listener to serve on instead of
// creating the unix socket at path. It returns nil, nil when the process was
// not socket activated.
//
// With one passed socket that socket is used whatever its address: the unit
// file is the authority on where the service listens. With several, the one
// bound to path (or named after path's file name with FileDescriptorName=) is
// picked; finding none is an error rather than a guess.
//
// The LISTEN_* variables are removed from the environment either way, so a
// process the service starts does not think the sockets are its own.
func Listener(path string) (net.Listener, error) {
	if os.Getenv("LISTEN_FDS") == "" {
		return nil, nil
	}
	files := activation.Files(true)
	if len(files) == 0 {
		// LISTEN_PID names another process (the variables leaked from a
		// parent): not ours to use.
		return nil, nil
	}
	var (
		lis  []net.Listener
		errs []error
	)
	for _, f := range files {
		l, err := net.FileListener(f)
		// FileListener dups the descriptor; the original is not needed.
		_ = f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("passed fd %s is not a listening socket: %w", f.Name(), err))
			continue
		}
		lis = append(lis, &namedListener{Listener: l, name: f.Name()})
	}
	pick := func(l net.Listener) {
		for _, other := range lis {
			if other != l {
				_ = other.Close()
			}
		}
	}
	switch {
	case len(lis) == 0:
		return nil, fmt.Errorf("socket activation: %w", errors.Join(errs...))
	case len(lis) == 1 && len(errs) == 0:
		return lis[0], nil
	}
	base := path[strings.LastIndex(path, "/")+1:]
	for _, l := range lis {
		if l.Addr().String() == path || l.(*namedListener).name == base {
			pick(l)
			return l, nil
		}
	}
	pick(nil)
	return nil, fmt.Errorf("socket activation: %d sockets passed and none is bound to %s; set ListenStream=%s in the .socket unit", len(files), path, path)
}

// namedListener remembers the fd name systemd gave (FileDescriptorName=).
type namedListener struct {
	net.Listener
	name string
}
