package socket

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cred is what the kernel recorded about the process at the other end of a
// unix connection when it connected (SO_PEERCRED, SO_PEERGROUPS): it cannot
// be forged by the peer.
type Cred struct {
	PID int32
	UID uint32
	// GID is the peer's effective group; Groups its supplementary groups.
	GID    uint32
	Groups []uint32
}

func (c Cred) String() string {
	return fmt.Sprintf("pid %d uid %d gid %d groups %v", c.PID, c.UID, c.GID, c.Groups)
}

// PeerCred asks the kernel who is at the other end of a unix connection.
func PeerCred(c net.Conn) (Cred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Cred{}, fmt.Errorf("peer credentials: %T is not a unix connection", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var (
		cred    Cred
		credErr error
	)
	err = raw.Control(func(fd uintptr) {
		u, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			credErr = fmt.Errorf("SO_PEERCRED: %w", err)
			return
		}
		cred = Cred{PID: u.Pid, UID: u.Uid, GID: u.Gid}
		cred.Groups, credErr = peerGroups(int(fd))
	})
	if err == nil {
		err = credErr
	}
	if err != nil {
		return Cred{}, fmt.Errorf("peer credentials: %w", err)
	}
	return cred, nil
}

// peerGroups reads SO_PEERGROUPS (Linux 4.13): the supplementary groups of
// the peer when it connected. x/sys has no helper for this array option.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		size := uint32(len(buf) * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == unix.ERANGE:
			buf = make([]uint32, size/4+1)
			continue
		case errno != 0:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", errno)
		}
		return buf[:size/4], nil
	}
}

// Peers is who may talk to a socket beyond what its file mode lets
// connect: the listed users, and anyone whose effective or supplementary
// groups include a listed group. Root and the serving process's own user are
// always allowed. The zero Peers allows everyone the file mode lets in.
type Peers struct {
	UIDs []uint32
	GIDs []uint32
	// names keep the configured spelling for the refusal message.
	names string
}

// ParsePeers reads users and groups given by name or number.
func ParsePeers(users, groups []string) (Peers, error) {
	var p Peers
	var errs []error
	for _, u := range users {
		id, err := lookupID(u, func(n string) (string, error) {
			usr, err := user.Lookup(n)
			if err != nil {
				return "", err
			}
			return usr.Uid, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("socket_allowed_users: %q: %w", u, err))
			continue
		}
		p.UIDs = append(p.UIDs, id)
	}
	for _, g := range groups {
		id, err := lookupID(g, func(n string) (string, error) {
			grp, err := user.LookupGroup(n)
			if err != nil {
				return "", err
			}
			return grp.Gid, nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("socket_allowed_groups: %q: %w", g, err))
			continue
		}
		p.GIDs = append(p.GIDs, id)
	}
	if len(errs) > 0 {
		return Peers{}, errors.Join(errs...)
	}
	var names []string
	if len(users) > 0 {
		names = append(names, "users "+strings.Join(users, ","))
	}
	if len(groups) > 0 {
		names = append(names, "groups "+strings.Join(groups, ","))
	}
	p.names = strings.Join(names, ", ")
	return p, nil
}

func lookupID(s string, byName func(string) (string, error)) (uint32, error) {
	if id, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(id), nil
	}
	idStr, err := byName(s)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseUint(idStr, 10, 32)
	return uint32(id), err
}

// Restricted reports whether p limits anyone.
func (p Peers) Restricted() bool { return len(p.UIDs) > 0 || len(p.GIDs) > 0 }

// Allow returns nil when c may talk to the socket, and otherwise an error
// naming the peer and who is allowed.
func (p Peers) Allow(c Cred) error {
	if !p.Restricted() || c.UID == 0 || c.UID == uint32(os.Geteuid()) || slices.Contains(p.UIDs, c.UID) {
		return nil
	}
	if slices.Contains(p.GIDs, c.GID) || slices.ContainsFunc(c.Groups, func(g uint32) bool { return slices.Contains(p.GIDs, g) }) {
		return nil
	}
	allowed := p.names
	if allowed == "" {
		allowed = fmt.Sprintf("uids %v, gids %v", p.UIDs, p.GIDs)
	}
	return fmt.Errorf("uid %d (gid %d, groups %v) may not use this socket: allowed are root, uid %d and %s", c.UID, c.GID, c.Groups, os.Geteuid(), allowed)
}

// PeerConn is a connection accepted by a listener with WithPeers: it
// carries the peer's credentials and, for a peer Peers does not allow, the
// refusal. The connection is handed over anyway so the protocol on top can
// answer with its own error (grpcserver answers every call on it with
// PermissionDenied); a server must check Refused before serving.
type PeerConn struct {
	net.Conn
	cred    Cred
	refused error
}

// Cred is the peer's credentials.
func (c *PeerConn) Cred() Cred { return c.cred }

// Refused is nil for an allowed peer, else why it is refused.
func (c *PeerConn) Refused() error { return c.refused }

type peerListener struct {
	net.Listener
	peers Peers
}

// CheckPeers wraps a unix listener so every connection it accepts is a
// *PeerConn checked against p; for a listener Listen did not make
// (a socket systemd passed).
func CheckPeers(l net.Listener, p Peers) net.Listener {
	if !p.Restricted() {
		return l
	}
	return &peerListener{Listener: l, peers: p}
}

func (l *peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pc := &PeerConn{Conn: c}
	pc.cred, pc.refused = PeerCred(c)
	if pc.refused == nil {
		pc.refused = l.peers.Allow(pc.cred)
	}
	return pc, nil
}
