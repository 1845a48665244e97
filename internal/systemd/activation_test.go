package systemd

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The test binary re-executes itself as the activated process: systemd's
// protocol needs the socket at fd 3 and LISTEN_PID equal to the receiver's PID,
// which only a fresh process can have. `sh -c 'LISTEN_PID=$$ exec ...'` keeps
// the PID across the exec, exactly as systemd's own fork+exec does.
func TestMain(m *testing.M) {
	if mode := os.Getenv("SYSTEMD_TEST_CHILD"); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child takes the passed listener, reports its address, and answers one
// connection with "hello".
func child(path string) int {
	lis, err := Listener(path)
	if err != nil {
		fmt.Println("ERR", err)
		return 0
	}
	if lis == nil {
		fmt.Println("NONE")
		return 0
	}
	if os.Getenv("LISTEN_FDS") != "" || os.Getenv("LISTEN_PID") != "" {
		fmt.Println("ERR LISTEN_* left in the environment")
		return 0
	}
	fmt.Println("ADDR", lis.Addr().String())
	c, err := lis.Accept()
	if err != nil {
		return 1
	}
	_, _ = c.Write([]byte("hello"))
	_ = c.Close()
	return 0
}

func listenUnix(t *testing.T, dir, name string) (*net.UnixListener, *os.File) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, name), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := l.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close(); _ = l.Close() })
	return l, f
}

// runChild starts the test binary with files at fd 3.. and the LISTEN_* variables.
func runChild(t *testing.T, path string, files []*os.File, env ...string) (first string, wait func()) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$; export LISTEN_PID; exec "$0"`, exe)
	cmd.Env = append(os.Environ(), "SYSTEMD_TEST_CHILD="+path, fmt.Sprintf("LISTEN_FDS=%d", len(files)))
	cmd.Env = append(cmd.Env, env...)
	cmd.ExtraFiles = files
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child said nothing: %v", err)
	}
	return strings.TrimSpace(line), func() { _ = cmd.Wait() }
}

func dialHello(t *testing.T, path string) {
	t.Helper()
	c, err := net.DialTimeout("unix", path, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	buf := make([]byte, 5)
	if _, err := c.Read(buf); err != nil || string(buf) != "hello" {
		t.Fatalf("read %q, %v; want hello from the activated child", buf, err)
	}
}

func TestListenerNotActivated(t *testing.T) {
	t.Setenv("LISTEN_FDS", "")
	lis, err := Listener("/tmp/x.sock")
	if lis != nil || err != nil {
		t.Fatalf("Listener without LISTEN_FDS = %v, %v; want nil, nil", lis, err)
	}
	if Activated() {
		t.Fatal("Activated without LISTEN_FDS")
	}
}

func TestListenerForAnotherPID(t *testing.T) {
	// Variables leaked from a parent name the parent's PID: not ours.
	t.Setenv("LISTEN_FDS", "1")
	t.Setenv("LISTEN_PID", "1")
	lis, err := Listener("/tmp/x.sock")
	if lis != nil || err != nil {
		t.Fatalf("Listener for another PID = %v, %v; want nil, nil", lis, err)
	}
	if os.Getenv("LISTEN_FDS") != "" {
		t.Fatal("LISTEN_FDS kept after being refused")
	}
}

func TestListenerSingleSocket(t *testing.T) {
	dir := t.TempDir()
	_, f := listenUnix(t, dir, "a.sock")
	path := filepath.Join(dir, "a.sock")
	// The configured path differs: with one passed socket the unit file wins.
	first, wait := runChild(t, filepath.Join(dir, "other.sock"), []*os.File{f})
	if first != "ADDR "+path {
		t.Fatalf("child: %q, want ADDR %s", first, path)
	}
	dialHello(t, path)
	wait()
}

func TestListenerPicksByPathAmongSeveral(t *testing.T) {
	dir := t.TempDir()
	_, fa := listenUnix(t, dir, "a.sock")
	_, fb := listenUnix(t, dir, "b.sock")
	path := filepath.Join(dir, "b.sock")
	first, wait := runChild(t, path, []*os.File{fa, fb})
	if first != "ADDR "+path {
		t.Fatalf("child: %q, want ADDR %s", first, path)
	}
	dialHello(t, path)
	wait()
}

func TestListenerPicksByNameAmongSeveral(t *testing.T) {
	dir := t.TempDir()
	_, fa := listenUnix(t, dir, "a.sock")
	_, fb := listenUnix(t, dir, "b.sock")
	first, _ := runChild(t, "/run/microlet/b.sock", []*os.File{fa, fb}, "LISTEN_FDNAMES=a.sock:b.sock")
	if first != "ADDR "+filepath.Join(dir, "b.sock") {
		t.Fatalf("child: %q, want the socket named b.sock", first)
	}
}

func TestListenerSeveralNoneMatching(t *testing.T) {
	dir := t.TempDir()
	_, fa := listenUnix(t, dir, "a.sock")
	_, fb := listenUnix(t, dir, "b.sock")
	first, _ := runChild(t, filepath.Join(dir, "c.sock"), []*os.File{fa, fb})
	if !strings.HasPrefix(first, "ERR") || !strings.Contains(first, "c.sock") {
		t.Fatalf("child: %q, want an error naming the configured path", first)
	}
}

func TestListenerNotASocket(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	first, _ := runChild(t, "/tmp/x.sock", []*os.File{f})
	if !strings.HasPrefix(first, "ERR") || !strings.Contains(first, "not a listening socket") {
		t.Fatalf("child: %q, want an error saying the fd is not a listening socket", first)
	}
}
