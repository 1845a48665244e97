package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
)

// services are the binaries the units start, in the order of components.All.
var services = func() []string {
	out := make([]string, 0, len(components.All))
	for _, c := range components.All {
		out = append(out, c.Name)
	}
	return out
}()

// binaries builds the real service binaries and the CLI (which
// microlet-credentials.service runs) once per test run. Plain `go build`
// flags, so the build cache other tests fill is reused.
func binaries(t *testing.T) string {
	t.Helper()
	pkgs := []string{"github.com/microlet/microlet/cmd/microlet"}
	for _, s := range services {
		pkgs = append(pkgs, "github.com/microlet/microlet/services/"+s)
	}
	return testenv.Build(t, nil, pkgs...)
}

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// TestUnitsVerify installs every unit with install.sh into a temp root holding
// the built binaries and a copy of this machine's system units, and runs
// `systemd-analyze verify` on them. Any output at all fails the test: systemd
// reports unknown keys and bad values as warnings with exit code 0.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		testenv.RequireOrSkip(t, "systemd-analyze not installed (apt-get install systemd): %v", err)
	}
	bin := binaries(t)
	root := t.TempDir()
	out, err := exec.Command("bash", "install.sh", "--root", root, "--bin", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	// verify resolves sysinit.target, sockets.target, ... inside the root.
	sys := filepath.Join(root, "usr/lib/systemd")
	if err := os.MkdirAll(sys, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "/usr/lib/systemd/system", sys+"/").CombinedOutput(); err != nil {
		t.Fatalf("copy system units: %v\n%s", err, out)
	}
	unitDir := filepath.Join(root, "etc/systemd/system")
	var units []string
	for _, s := range services {
		units = append(units, "microlet-"+s+".socket", "microlet-"+s+".service")
		if _, err := os.Stat(filepath.Join(root, "usr/local/libexec/microlet", s)); err != nil {
			t.Fatalf("install.sh did not install %s: %v", s, err)
		}
	}
	units = append(units, "microlet-credentials.service", "microlet.target")
	cmd := exec.Command(analyze, append([]string{"verify", "--root=" + root, "--man=no", "--generators=no"}, units...)...)
	cmd.Dir = unitDir
	out, err = cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: err=%v\n%s", err, out)
	}

	// The check itself must be able to fail: a broken unit is reported.
	bad := filepath.Join(unitDir, "microlet-podconfig.service")
	data, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, bytes.Replace(data, []byte("[Service]\n"), []byte("[Service]\nNoSuchKey=1\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(analyze, "verify", "--root="+root, "--man=no", "--generators=no", "microlet-podconfig.service")
	cmd.Dir = unitDir
	if out, _ := cmd.CombinedOutput(); !bytes.Contains(out, []byte("NoSuchKey")) {
		t.Fatalf("systemd-analyze verify did not report an unknown key:\n%s", out)
	}
}

// TestUnitsCoverEveryService keeps the unit files, the target and the
// environment example in step with the list of services.
func TestUnitsCoverEveryService(t *testing.T) {
	target, err := os.ReadFile("microlet.target")
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile("microlet.env")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		svc, err := os.ReadFile("microlet-" + s + ".service")
		if err != nil {
			t.Fatal(err)
		}
		sock, err := os.ReadFile("microlet-" + s + ".socket")
		if err != nil {
			t.Fatal(err)
		}
		envVar := strings.ToUpper(strings.ReplaceAll(s, "-", "_")) + "_ARGS"
		for _, want := range []string{"Type=notify", "WatchdogSec=", "RuntimeDirectory=microlet", "RuntimeDirectoryPreserve=yes",
			"Requires=microlet-" + s + ".socket", "ExecStart=/usr/local/libexec/microlet/" + s + " $MICROLET_ARGS $" + envVar} {
			if !bytes.Contains(svc, []byte(want)) {
				t.Errorf("microlet-%s.service lacks %q", s, want)
			}
		}
		if !bytes.Contains(sock, []byte("ListenStream=/run/microlet/")) {
			t.Errorf("microlet-%s.socket does not listen in /run/microlet", s)
		}
		for _, u := range []string{"microlet-" + s + ".service", "microlet-" + s + ".socket"} {
			if !bytes.Contains(target, []byte(u)) {
				t.Errorf("microlet.target does not want %s", u)
			}
		}
		if !bytes.Contains(env, []byte("\n"+envVar+"=")) {
			t.Errorf("microlet.env has no %s", envVar)
		}
	}
}

// child is one run of a real service binary started the way systemd starts it.
type child struct {
	cmd  *exec.Cmd
	logs *testenv.LockedBuffer
	done chan struct{} // closed once the process exited; err is set then
	err  error
}

// start runs binary with args. With lis, the listening socket is passed as fd
// 3 with LISTEN_FDS=1, and `sh -c 'LISTEN_PID=$$ exec ...'` makes LISTEN_PID
// the service's own PID across the exec, as systemd's fork+exec does.
func start(t *testing.T, binary string, lis *os.File, env []string, args ...string) *child {
	t.Helper()
	var cmd *exec.Cmd
	if lis != nil {
		cmd = exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@"`, binary}, args...)...)
		cmd.ExtraFiles = []*os.File{lis}
		env = append(env, "LISTEN_FDS=1", "LISTEN_FDNAMES="+filepath.Base(lis.Name()))
	} else {
		cmd = exec.Command(binary, args...)
	}
	cmd.Env = append(os.Environ(), env...)
	c := &child{cmd: cmd, logs: &testenv.LockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout = c.logs
	cmd.Stderr = c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(binary), c.logs.String())
		}
	})
	return c
}

// wait returns the exit error once the process ended.
func (c *child) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(60 * time.Second):
		t.Fatalf("process %d did not exit\n%s", c.cmd.Process.Pid, c.logs.String())
		return nil
	}
}

func waitServing(t *testing.T, path string) {
	t.Helper()
	cc, err := grpcclient.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := grpcclient.WaitServing(ctx, cc, ""); err != nil {
		t.Fatal(err)
	}
}

// podconfigArgs runs podconfig with a (empty) static-pod dir: with no pod
// source at all it has nothing to run and exits at once.
func podconfigArgs(t *testing.T, dir string) []string {
	t.Helper()
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{"--run-dir", dir, "--data-dir", filepath.Join(dir, "data"), "--node-name", "sd-test",
		"--shutdown-timeout", "5s", "--manifest-dir", manifests}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("socket gone: %v", err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestSocketActivationSurvivesRestart hands the real podconfig binary a
// listening socket the way systemd does. The service serves on that fd, and
// when it is SIGKILLed the socket stays: a client that connects while no
// process runs waits in the backlog and is answered by the next process on the
// same fd. A clean SIGTERM stop leaves the socket too.
func TestSocketActivationSurvivesRestart(t *testing.T) {
	bin := filepath.Join(binaries(t), "podconfig")
	dir := testenv.ShortDir(t, "msd")
	path := filepath.Join(dir, "podconfig.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	// Like systemd, the "manager" (this test) keeps the socket open for good.
	defer l.Close()
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := inode(t, path)
	args := podconfigArgs(t, dir)

	first := start(t, bin, f, nil, args...)
	waitServing(t, path)
	if !strings.Contains(first.logs.String(), "socket_activated=true") {
		t.Fatalf("the service did not say it took the passed socket:\n%s", first.logs.String())
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.wait(t)
	if inode(t, path) != ino {
		t.Fatal("the socket file was replaced")
	}
	// Nobody serves now, yet connecting works: the kernel queues it on the
	// socket this test (systemd) still holds.
	raw, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		t.Fatalf("connect while the service is down: %v", err)
	}
	used := false
	cc, err := grpc.NewClient("passthrough:///queued",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			if used {
				return nil, errors.New("only the connection made while the service was down may be used")
			}
			used = true
			return raw, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	second := start(t, bin, f, nil, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testenv.Eventually(t, "the connection queued while the service was down served by its successor", time.Minute, func() error {
		resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatalf("health over the queued connection: %v", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health %v", resp.GetStatus())
		}
		return nil
	})

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.wait(t); err != nil {
		t.Fatalf("SIGTERM: %v (want a clean exit)", err)
	}
	if inode(t, path) != ino {
		t.Fatal("a clean stop removed or replaced the socket systemd owns")
	}
	start(t, bin, f, nil, args...)
	waitServing(t, path)
}

// notifications collects the datagrams sent to a NOTIFY_SOCKET.
type notifications struct {
	conn *net.UnixConn
	path string
}

func listenNotify(t *testing.T, dir string) *notifications {
	t.Helper()
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &notifications{conn: conn, path: path}
}

// next returns the next notification, skipping watchdog pings when skipPings.
func (n *notifications) next(t *testing.T, skipPings bool) string {
	t.Helper()
	buf := make([]byte, 4096)
	for {
		_ = n.conn.SetReadDeadline(time.Now().Add(60 * time.Second))
		m, err := n.conn.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("no notification within 60 s")
			}
			t.Fatal(err)
		}
		msg := string(buf[:m])
		if skipPings && msg == "WATCHDOG=1" {
			continue
		}
		return msg
	}
}

// TestNotify runs the real podconfig binary with a NOTIFY_SOCKET and a
// watchdog, as a Type=notify unit with WatchdogSec= does: READY=1 arrives only
// when gRPC health already answers SERVING, WATCHDOG=1 follows while it
// serves, and SIGTERM sends STOPPING=1 before a clean exit.
func TestNotify(t *testing.T) {
	bin := filepath.Join(binaries(t), "podconfig")
	dir := testenv.ShortDir(t, "msd")
	n := listenNotify(t, dir)
	path := filepath.Join(dir, "podconfig.sock")
	// WATCHDOG_USEC=2s: a ping every second.
	c := start(t, bin, nil, []string{"NOTIFY_SOCKET=" + n.path, "WATCHDOG_USEC=2000000"},
		podconfigArgs(t, dir)...)

	ready := n.next(t, false)
	if !strings.HasPrefix(ready, "READY=1") {
		t.Fatalf("first notification %q, want READY=1", ready)
	}
	// READY=1 is sent after health flipped, so health must say SERVING now.
	cc, err := grpcclient.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := grpcclient.Check(ctx, cc, "")
	if err != nil || st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after READY=1: %v %v, want SERVING", st, err)
	}
	for range 2 {
		if msg := n.next(t, false); msg != "WATCHDOG=1" {
			t.Fatalf("notification %q while serving, want WATCHDOG=1", msg)
		}
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if msg := n.next(t, true); !strings.HasPrefix(msg, "STOPPING=1") {
		t.Fatalf("notification %q after SIGTERM, want STOPPING=1", msg)
	}
	if err := c.wait(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	// Nothing after STOPPING=1, not even a late watchdog ping.
	_ = n.conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if m, err := n.conn.Read(make([]byte, 64)); err == nil {
		t.Fatalf("notification after STOPPING=1 (%d bytes)", m)
	}
}

// unitDeps returns the units named by the Wants= and After= lines of a unit
// file's [Unit] section, each sorted.
func unitDeps(t *testing.T, file string) (wants, after []string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		if section != "[Unit]" {
			continue
		}
		if v, ok := strings.CutPrefix(line, "Wants="); ok {
			wants = append(wants, strings.Fields(v)...)
		}
		if v, ok := strings.CutPrefix(line, "After="); ok {
			after = append(after, strings.Fields(v)...)
		}
	}
	slices.Sort(wants)
	slices.Sort(after)
	return wants, after
}

// TestUnitDependenciesFollowComponents keeps every service unit's Wants= and
// After= what internal/components says: the sockets of the services it needs
// or calls, and microlet-credentials.service; After= adds the unit's own
// socket and, for the services that talk to Docker, docker.service.
func TestUnitDependenciesFollowComponents(t *testing.T) {
	usesDocker := map[string]bool{components.RuntimeShim: true, components.PodSyncd: true}
	for _, c := range components.All {
		want := []string{"microlet-credentials.service"}
		for _, n := range append(slices.Clone(c.Needs), c.Calls...) {
			want = append(want, "microlet-"+n+".socket")
		}
		wantAfter := append(slices.Clone(want), "microlet-"+c.Name+".socket")
		if usesDocker[c.Name] {
			wantAfter = append(wantAfter, "docker.service")
		}
		slices.Sort(want)
		slices.Sort(wantAfter)
		wants, after := unitDeps(t, "microlet-"+c.Name+".service")
		if !slices.Equal(wants, want) {
			t.Errorf("microlet-%s.service: Wants=%v, components says %v", c.Name, wants, want)
		}
		if !slices.Equal(after, wantAfter) {
			t.Errorf("microlet-%s.service: After=%v, components says %v", c.Name, after, wantAfter)
		}
	}
}
