package grpcserver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
)

// peerHelperEnv makes the test binary a client that asks the health service
// on the socket it names and prints the answer's code and message.
const peerHelperEnv = "MICROLET_PEER_HELPER_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(peerHelperEnv); sock != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cc, err := grpcclient.Dial(sock)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		_, err = grpcclient.Check(ctx, cc, "")
		st := status.Convert(err)
		fmt.Printf("%s: %s\n", st.Code(), st.Message())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// asUser runs the test binary as a client under uid/gid/groups and returns
// what it printed.
func asUser(t *testing.T, bin, sock string, uid, gid uint32, groups ...uint32) string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), peerHelperEnv+"="+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client as uid %d: %v: %s", uid, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A socket restricted to a group answers calls from root and members of the
// group (effective or supplementary) and refuses everyone else with
// PermissionDenied naming the caller, over real sockets with real processes
// of other users. The file mode lets everyone connect, so the refusal is the
// peer check's.
func TestPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run clients as other users")
	}
	const (
		nobody  = 65534
		allowed = 4242 // a group nobody is in unless the test says so
		other   = 4243
	)
	dir := testenv.ShortDir(t, "peer")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The test binary where the other users can run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client")
	if err := os.WriteFile(bin, data, 0o755); err != nil { //nolint:gosec // run by other users on purpose
		t.Fatal(err)
	}
	peers, err := socket.ParsePeers(nil, []string{fmt.Sprint(allowed)})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	lis, err := socket.Listen(sock, socket.WithMode(0o666), socket.WithPeers(peers))
	if err != nil {
		t.Fatal(err)
	}
	s := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(time.Second) })

	for _, tc := range []struct {
		name     string
		uid, gid uint32
		groups   []uint32
		want     string
	}{
		{"root", 0, 0, nil, "OK"},
		{"member by effective group", nobody, allowed, nil, "OK"},
		{"member by supplementary group", nobody, nobody, []uint32{other, allowed}, "OK"},
		{"not a member", nobody, nobody, []uint32{other}, "PermissionDenied: uid 65534 (gid 65534, groups [4243]) may not use this socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := asUser(t, bin, sock, tc.uid, tc.gid, tc.groups...)
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("client said %q, want %q...", got, tc.want)
			}
		})
	}
}
