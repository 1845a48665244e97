package socket

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/microlet/microlet/internal/testenv"
)

func shortDir(t *testing.T) string { return testenv.ShortDir(t, "sock") }

func TestListen(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, path string) func()
		wantErr string
	}{
		{name: "fresh path"},
		{
			name: "stale socket replaced",
			prepare: func(t *testing.T, path string) func() {
				l, err := net.Listen("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				_ = l.Close() // leaves the file with nobody answering
				if _, err := os.Stat(path); err != nil {
					t.Fatalf("stale socket not left behind: %v", err)
				}
				return func() {}
			},
		},
		{
			name: "live socket refused",
			prepare: func(t *testing.T, path string) func() {
				l, err := net.Listen("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				return func() { _ = l.Close() }
			},
			wantErr: "in use",
		},
		{
			name: "regular file refused",
			prepare: func(t *testing.T, path string) func() {
				if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
				return func() {}
			},
			wantErr: "not a socket",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(shortDir(t), "s.sock")
			if tc.prepare != nil {
				defer tc.prepare(t, path)()
			}
			lis, err := Listen(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Listen error = %v, want one containing %q", err, tc.wantErr)
				}
				if tc.wantErr == "in use" && !errors.Is(err, ErrInUse) {
					t.Fatalf("error %v is not ErrInUse", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != 0o660 {
				t.Fatalf("mode = %o, want 660", got)
			}
			if !Alive(path) {
				t.Fatal("listener does not accept connections")
			}
			_ = lis.Close()
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Fatalf("socket not removed on close: %v", err)
			}
		})
	}
}

func TestListenPathTooLong(t *testing.T) {
	path := "/tmp/" + strings.Repeat("x", 120) + ".sock"
	_, err := Listen(path)
	if err == nil || !strings.Contains(err.Error(), "longer than the 107") {
		t.Fatalf("error = %v, want a path-length error", err)
	}
}

func TestPathFromEndpoint(t *testing.T) {
	for in, want := range map[string]string{"unix:///a/b.sock": "/a/b.sock", "unix:/a.sock": "/a.sock", "/x.sock": "/x.sock"} {
		got, err := PathFromEndpoint(in)
		if err != nil || got != want {
			t.Errorf("PathFromEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := PathFromEndpoint("tcp://1.2.3.4:5"); err == nil {
		t.Error("tcp endpoint accepted")
	}
}

// Listen refuses a socket directory others could put their own socket in.
func TestListenRefusesUnsafeDir(t *testing.T) {
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := Listen(filepath.Join(dir, "s.sock"))
	if err == nil || !strings.Contains(err.Error(), "writable by everyone") {
		t.Fatalf("world-writable dir: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err = Listen(filepath.Join(dir, "s.sock"))
		if err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Fatalf("dir of another user: %v", err)
		}
	}
}

func TestParsePeers(t *testing.T) {
	p, err := ParsePeers([]string{"0", "root"}, []string{"0"})
	if err != nil || len(p.UIDs) != 2 || len(p.GIDs) != 1 || !p.Restricted() {
		t.Fatalf("ParsePeers = %+v, %v", p, err)
	}
	if _, err := ParsePeers(nil, []string{"no-such-group-microlet"}); err == nil || !strings.Contains(err.Error(), "socket_allowed_groups") {
		t.Fatalf("unknown group: %v", err)
	}
	if err := (Peers{}).Allow(Cred{UID: 12345}); err != nil {
		t.Fatalf("unrestricted Peers refused: %v", err)
	}
}
