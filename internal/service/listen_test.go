package service

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/microlet/microlet/internal/testenv"
)

// A socket systemd passed is checked, not taken on trust: socket_group must
// be its group (the service cannot chown what the .socket unit owns, and a
// silently ignored setting would leave the socket open to another group),
// and its directory must be one nobody else could write a socket into.
func TestCheckPassedSocket(t *testing.T) {
	dir := testenv.ShortDir(t, "pass")
	path := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", path) // as systemd would: root's group
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := checkPassed(path, ""); err != nil {
		t.Fatalf("no socket_group: %v", err)
	}
	gid := os.Getegid()
	if err := checkPassed(path, strconv.Itoa(gid)); err != nil {
		t.Fatalf("socket_group matching the socket's: %v", err)
	}
	err = checkPassed(path, strconv.Itoa(gid+4242))
	if err == nil || !strings.Contains(err.Error(), "SocketGroup=") {
		t.Fatalf("socket_group other than the socket's: %v, want an error pointing at SocketGroup=", err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	err = checkPassed(path, "")
	if err == nil || !strings.Contains(err.Error(), "writable by everyone") {
		t.Fatalf("world-writable socket dir: %v", err)
	}
}
