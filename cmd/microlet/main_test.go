package main

// These tests run the real binaries: TestMain builds microlet and every
// service once into a temp dir, and the tests start them as processes with
// short run dirs under /tmp (sun_path is 108 bytes).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microlet/microlet/cmd/microlet/internal/supervisor"
	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/testenv"
)

// binDir holds the binaries built by TestMain.
var binDir string

// waitLong bounds every wait on a condition: generous for a loaded 2-core machine.
const waitLong = 60 * time.Second

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "microlet-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir = dir
	return m.Run()
}

func buildBinaries(dir string) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	build := func(race bool, pkgs ...string) error {
		args := []string{"build", "-o", dir + "/"}
		if race {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, pkgs...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %v: %v\n%s", pkgs, err, out)
		}
		return nil
	}
	// The supervisor under test gets the race detector like the test itself;
	// the services are only its subjects.
	if err := build(raceEnabled, "./cmd/microlet"); err != nil {
		return err
	}
	// MICROLET_TEST_SERVICES_DIR reuses service binaries built elsewhere
	// (`make build` output) instead of building them here.
	// The supervisor runs them from microlet-services, as `microlet run`
	// does beside `make build` output; some tests start podconfig's and
	// runtime-shim's own binaries.
	names := []string{supervisor.MultiCallBinary}
	for _, c := range components.All {
		names = append(names, c.Name)
	}
	if pre := os.Getenv("MICROLET_TEST_SERVICES_DIR"); pre != "" {
		for _, name := range names {
			if err := os.Symlink(filepath.Join(pre, name), filepath.Join(dir, name)); err != nil {
				return err
			}
		}
		return nil
	}
	pkgs := []string{"./cmd/" + supervisor.MultiCallBinary}
	for _, name := range names[1:] {
		pkgs = append(pkgs, "./services/"+name)
	}
	return build(false, pkgs...)
}

// shortDir makes a run dir short enough for every socket path.
func shortDir(t *testing.T) string { return testenv.ShortDir(t, "mlt") }

// running is a `microlet run` process.
type running struct {
	cmd    *exec.Cmd
	runDir string
	stdout *testenv.LockedBuffer
	stderr *testenv.LockedBuffer
	done   chan struct{}
	err    error
}

func startMicrolet(t *testing.T, runDir string, args ...string) *running {
	t.Helper()
	r := &running{runDir: runDir, stdout: &testenv.LockedBuffer{}, stderr: &testenv.LockedBuffer{}, done: make(chan struct{})}
	// A manifest dir gives podconfig a source, as `make run` does; args may override it.
	full := append([]string{"run", "--run-dir", runDir, "--data-dir", t.TempDir(), "--bin-dir", binDir,
		"--node-name", "test-node", "--manifest-dir", t.TempDir(), "--kubelet-port=0"}, args...)
	r.cmd = exec.Command(filepath.Join(binDir, "microlet"), full...)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	// If the test binary dies, microlet dies, and with it its children.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
			return
		default:
		}
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(waitLong):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("microlet stderr:\n%s", r.stderr.String())
		}
	})
	return r
}

// waitExit waits for the process to end and returns its exit status.
func (r *running) waitExit(t *testing.T) int {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(waitLong):
		t.Fatalf("microlet did not exit within %s; stderr:\n%s", waitLong, r.stderr.String())
	}
	return r.cmd.ProcessState.ExitCode()
}

// runCLI runs the microlet binary to completion.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return cliEnv(t, nil, filepath.Join(binDir, "microlet"), args...)
}

func cliEnv(t *testing.T, env []string, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	if env != nil {
		cmd.Env = env
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return o.String(), e.String(), code
}

type statusJSON struct {
	Supervised bool `json:"supervised"`
	Components []struct {
		Name     string `json:"name"`
		Health   string `json:"health"`
		PID      int    `json:"pid"`
		Restarts int    `json:"restarts"`
		Socket   string `json:"socket"`
		External bool   `json:"external"`
	} `json:"components"`
}

func status(t *testing.T, runDir string) statusJSON {
	t.Helper()
	out, errOut, code := runCLI(t, "status", "--run-dir", runDir, "-o", "json")
	if code != 0 {
		t.Fatalf("microlet status: exit %d: %s", code, errOut)
	}
	var st statusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	return st
}

// eventually polls cond until it is true or waitLong passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, waitLong, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
}

func waitAllServing(t *testing.T, runDir string) statusJSON {
	t.Helper()
	var st statusJSON
	eventually(t, "every service SERVING", func() bool {
		st = status(t, runDir)
		if !st.Supervised || len(st.Components) != len(components.All) {
			return false
		}
		for _, c := range st.Components {
			if c.Health != "SERVING" {
				return false
			}
		}
		return true
	})
	return st
}

// logOrder returns the components named in the supervisor's log lines with
// msg, in the order they were written.
func logOrder(log, msg string) []string {
	re := regexp.MustCompile(`msg="` + regexp.QuoteMeta(msg) + `" .*component=([a-z-]+)`)
	var out []string
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, " | ") {
			continue // a child's own line
		}
		if m := re.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func sockets(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			out = append(out, e.Name())
		}
	}
	return out
}

func cmdline(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// TestRunStartsInOrderAndStopsInReverse drives the real `microlet run`: every
// service starts only after the services it needs are SERVING, `status` shows
// each SERVING, and SIGTERM stops them in exactly the reverse order, leaving
// no process and no socket behind.
func TestRunStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	runDir := shortDir(t)
	manifests := t.TempDir()
	r := startMicrolet(t, runDir, "--manifest-dir", manifests)
	st := waitAllServing(t, runDir)

	log := r.stderr.String()
	started, serving := logOrder(log, "service started"), logOrder(log, "service serving")
	for _, c := range components.All {
		if indexOf(started, c.Name) < 0 {
			t.Fatalf("%s never started; log:\n%s", c.Name, log)
		}
		for _, n := range c.Needs {
			// Lines are written in the order things happen: the dependency's
			// "serving" must be earlier in the merged log than the dependent's "started".
			if !servedBefore(log, n, c.Name) {
				t.Errorf("%s started before %s was serving; log:\n%s", c.Name, n, log)
			}
		}
	}
	if len(serving) < len(components.All) {
		t.Fatalf("serving lines %v", serving)
	}

	table, _, code := runCLI(t, "status", "--run-dir", runDir)
	if code != 0 {
		t.Fatalf("status exit %d", code)
	}
	for _, c := range components.All {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(c.Name) + `\s+SERVING\s+\d+\s+0\s`).MatchString(table) {
			t.Errorf("status table has no SERVING row for %s:\n%s", c.Name, table)
		}
	}
	if _, _, code := runCLI(t, "health", "podsyncd", "--run-dir", runDir); code != 0 {
		t.Errorf("health podsyncd exit %d, want 0", code)
	}
	// The supervisor turns SERVING itself once it saw every service serve.
	eventually(t, "health microlet exit 0", func() bool {
		_, _, code := runCLI(t, "health", "microlet", "--run-dir", runDir)
		return code == 0
	})
	// podconfig got the manifest dir.
	for _, c := range st.Components {
		if c.Name == components.PodConfig {
			if args := cmdline(t, c.PID); indexOf(args, "--manifest-dir="+manifests) < 0 {
				t.Errorf("podconfig args %q lack --manifest-dir", args)
			}
		}
	}

	// SIGKILL of one service: back SERVING with a new pid and restarts=1,
	// every other service untouched.
	pids := map[string]int{}
	for _, c := range st.Components {
		pids[c.Name] = c.PID
	}
	if err := syscall.Kill(pids[components.RuntimeShim], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "runtime-shim restarted and SERVING", func() bool {
		for _, c := range status(t, runDir).Components {
			if c.Name == components.RuntimeShim {
				return c.Health == "SERVING" && c.PID != pids[c.Name] && c.Restarts == 1
			}
		}
		return false
	})
	after := status(t, runDir)
	for _, c := range after.Components {
		if c.Name != components.RuntimeShim && (c.PID != pids[c.Name] || c.Restarts != 0 || c.Health != "SERVING") {
			t.Errorf("%s was touched by runtime-shim's restart: %+v", c.Name, c)
		}
	}
	if !regexp.MustCompile(`msg="restarting service" .*component=runtime-shim delay=500ms`).MatchString(r.stderr.String()) {
		t.Errorf("no first restart after 500ms in the log")
	}

	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.waitExit(t); code != 0 {
		t.Fatalf("microlet exit %d after SIGTERM; stderr:\n%s", code, r.stderr.String())
	}
	st = after
	stopped := logOrder(r.stderr.String(), "service stopped")
	var want []string
	for i := len(components.All) - 1; i >= 0; i-- {
		want = append(want, components.All[i].Name)
	}
	if strings.Join(stopped, ",") != strings.Join(want, ",") {
		t.Errorf("stop order %v, want %v", stopped, want)
	}
	for _, c := range st.Components {
		if pidAlive(c.PID) {
			t.Errorf("%s (pid %d) still runs after microlet exited", c.Name, c.PID)
		}
	}
	if left := sockets(t, runDir); len(left) > 0 {
		t.Errorf("sockets left in the run dir: %v", left)
	}
}

// servedBefore reports whether the log says dep was serving before dependent started.
func servedBefore(log, dep, dependent string) bool {
	sc := bufio.NewScanner(strings.NewReader(log))
	served := false
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, " | ") {
			continue
		}
		if strings.Contains(line, `msg="service serving"`) && strings.Contains(line, "component="+dep+" ") {
			served = true
		}
		if strings.Contains(line, `msg="service started"`) && strings.Contains(line, "component="+dependent+" ") {
			return served
		}
	}
	return false
}

// TestExternalRuntimeIsNotStarted points microlet at a runtime it does not
// own: it must not start runtime-shim, must wait for the external one, and
// must hand its endpoint to nodestatusd and podsyncd.
func TestExternalRuntimeIsNotStarted(t *testing.T) {
	t.Parallel()
	extDir := shortDir(t)
	extSock := filepath.Join(extDir, "cri.sock")
	ext := exec.Command(filepath.Join(binDir, "runtime-shim"), "--run-dir", extDir, "--socket", extSock, "--data-dir", t.TempDir())
	ext.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ext.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ext.Process.Signal(syscall.SIGTERM)
		_ = ext.Wait()
	})
	endpoint := "unix://" + extSock

	runDir := shortDir(t)
	r := startMicrolet(t, runDir, "--runtime-endpoint", endpoint)
	st := waitAllServing(t, runDir)

	for _, c := range st.Components {
		switch c.Name {
		case components.RuntimeShim:
			if !c.External || c.PID != 0 || c.Socket != extSock {
				t.Errorf("runtime-shim row = %+v, want external at %s without a pid", c, extSock)
			}
		case components.NodeStatusd, components.PodSyncd:
			if args := cmdline(t, c.PID); indexOf(args, "--runtime-endpoint="+endpoint) < 0 {
				t.Errorf("%s args %q lack --runtime-endpoint=%s", c.Name, args, endpoint)
			}
		}
	}
	if indexOf(logOrder(r.stderr.String(), "service started"), components.RuntimeShim) >= 0 {
		t.Errorf("microlet started runtime-shim although the runtime is external")
	}
	if _, err := os.Stat(filepath.Join(runDir, "runtime.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runtime.sock exists in the run dir (err=%v)", err)
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.waitExit(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// The external runtime is not ours to stop.
	if !pidAlive(ext.Process.Pid) {
		t.Errorf("microlet stopped the external runtime")
	}
}

// TestUsageErrors: whatever the user must fix is one line naming the
// problem, with exit status 2.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	bogusConfig := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(bogusConfig, []byte("run_dir: /tmp/x\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badArgsConfig := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(badArgsConfig, []byte("args:\n  nosuch: [\"--x\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"negative stop timeout", []string{"run", "--stop-timeout=-1s"}, "stop_timeout must be at least"},
		{"bad log level", []string{"run", "--log-level=loud"}, `log_level "loud"`},
		{"unknown config key", []string{"run", "--config", bogusConfig}, "field bogus not found"},
		{"args for an unknown service", []string{"run", "--config", badArgsConfig}, `args: unknown service "nosuch"`},
		{"bad manifest url", []string{"run", "--manifest-url=ftp://x/y"}, "manifest_url"},
		{"unknown flag", []string{"run", "--nope"}, "nope"},
		{"run dir too long", []string{"run", "--run-dir=/tmp/" + strings.Repeat("d", 110)}, "longer than"},
		{"unknown command", []string{"bogus"}, "unknown command"},
		{"health of an unknown service", []string{"health", "nosuch"}, `unknown service "nosuch"`},
		{"status output", []string{"status", "-o", "xml"}, `--output "xml"`},
		{"get nothing", []string{"get"}, "pods or node"},
		{"get pods yaml", []string{"get", "pods", "-o", "yaml"}, `--output "yaml"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, errOut, code := runCLI(t, tc.args...)
			checkUsageError(t, errOut, code, tc.want)
		})
	}

	t.Run("missing binary", func(t *testing.T) {
		// microlet alone in a dir, and nothing on $PATH.
		lone := t.TempDir()
		data, err := os.ReadFile(filepath.Join(binDir, "microlet"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(lone, "microlet"), data, 0o755); err != nil {
			t.Fatal(err)
		}
		env := []string{"PATH=" + t.TempDir(), "HOME=" + os.Getenv("HOME")}
		_, errOut, code := cliEnv(t, env, filepath.Join(lone, "microlet"), "run", "--run-dir", shortDir(t), "--data-dir", t.TempDir())
		checkUsageError(t, errOut, code, `service binary "podconfig" not found`)
	})

	t.Run("supervisor socket served by a live process", func(t *testing.T) {
		runDir := shortDir(t)
		holdSocket(t, filepath.Join(runDir, components.SupervisorSocket))
		_, errOut, code := runCLI(t, "run", "--run-dir", runDir, "--data-dir", t.TempDir(), "--bin-dir", binDir)
		checkUsageError(t, errOut, code, "in use by a live process")
	})

	t.Run("service socket served by a live process", func(t *testing.T) {
		runDir := shortDir(t)
		holdSocket(t, filepath.Join(runDir, "statusd.sock"))
		_, errOut, code := runCLI(t, "run", "--run-dir", runDir, "--data-dir", t.TempDir(), "--bin-dir", binDir)
		checkUsageError(t, errOut, code, "statusd.sock: the socket of statusd is already served")
	})

	t.Run("metrics port in use", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lis.Close() }()
		_, errOut, code := runCLI(t, "run", "--run-dir", shortDir(t), "--data-dir", t.TempDir(), "--bin-dir", binDir,
			"--metrics-addr", lis.Addr().String())
		checkUsageError(t, errOut, code, "metrics_addr "+lis.Addr().String())
	})

	t.Run("bad value passed on to a service", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(cfg, []byte("args:\n  cloudsyncd: [\"--log-format=fancy\"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		runDir := shortDir(t)
		r := startMicrolet(t, runDir, "--config", cfg)
		code := r.waitExit(t)
		lines := strings.Split(strings.TrimSpace(r.stderr.String()), "\n")
		checkUsageError(t, lines[len(lines)-1]+"\n", code, "cloudsyncd exited with status 2 before serving")
		if !strings.Contains(lines[len(lines)-1], "fancy") {
			t.Errorf("error does not quote the service's own message: %s", lines[len(lines)-1])
		}
		if left := sockets(t, runDir); len(left) > 0 {
			t.Errorf("sockets left in the run dir: %v", left)
		}
	})
}

func checkUsageError(t *testing.T, stderr string, code int, want string) {
	t.Helper()
	if code != 2 {
		t.Errorf("exit status %d, want 2; stderr: %s", code, stderr)
	}
	if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "microlet: ") {
		t.Errorf("want one line starting with \"microlet: \", got %q", stderr)
	}
	if !strings.Contains(stderr, want) {
		t.Errorf("stderr %q does not contain %q", stderr, want)
	}
}

// holdSocket listens on path for the rest of the test, like a live service.
func holdSocket(t *testing.T, path string) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
}

// TestCLIWithoutSupervisor covers systemd/compose deployments: nothing serves
// microlet.sock, so status, health and get talk to the service sockets.
func TestCLIWithoutSupervisor(t *testing.T) {
	t.Parallel()
	runDir := shortDir(t)
	manifests := t.TempDir()
	pod := "apiVersion: v1\nkind: Pod\nmetadata: {name: hello}\nspec:\n  containers: [{name: c, image: busybox}]\n"
	if err := os.WriteFile(filepath.Join(manifests, "hello.yaml"), []byte(pod), 0o600); err != nil {
		t.Fatal(err)
	}
	pc := exec.Command(filepath.Join(binDir, "podconfig"), "--run-dir", runDir, "--data-dir", t.TempDir(),
		"--manifest-dir", manifests, "--node-name", "test-node")
	pc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var pcErr testenv.LockedBuffer
	pc.Stderr = &pcErr
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pc.Process.Signal(syscall.SIGTERM)
		_ = pc.Wait()
		if t.Failed() {
			t.Logf("podconfig stderr:\n%s", pcErr.String())
		}
	})
	eventually(t, "podconfig SERVING", func() bool {
		_, _, code := runCLI(t, "health", "podconfig", "--run-dir", runDir)
		return code == 0
	})

	st := status(t, runDir)
	if st.Supervised {
		t.Errorf("status claims a supervisor")
	}
	for _, c := range st.Components {
		want, wantPID := "DOWN", 0
		if c.Name == components.PodConfig {
			want, wantPID = "SERVING", pc.Process.Pid
		}
		if c.Health != want || c.PID != wantPID || c.Restarts != -1 {
			t.Errorf("%s: health %s pid %d restarts %d, want %s pid %d restarts -1", c.Name, c.Health, c.PID, c.Restarts, want, wantPID)
		}
	}
	out, _, code := runCLI(t, "health", "unix://"+filepath.Join(runDir, "podconfig.sock"))
	if code != 0 || !strings.Contains(out, "SERVING") {
		t.Errorf("health by endpoint: exit %d, %q", code, out)
	}
	_, errOut, code := runCLI(t, "health", "statusd", "--run-dir", runDir)
	if code != 1 || !strings.Contains(errOut, "DOWN") {
		t.Errorf("health of a stopped service: exit %d, %q; want 1 and DOWN", code, errOut)
	}

	// get pods: podconfig lists the static pod (statusd is down, so the
	// phase is podconfig's own), or says in one line that it cannot yet.
	out, errOut, code = runCLI(t, "get", "pods", "--run-dir", runDir)
	switch code {
	case 0:
		eventually(t, "the static pod listed", func() bool {
			out, errOut, code = runCLI(t, "get", "pods", "--run-dir", runDir)
			return code == 0 && regexp.MustCompile(`(?m)^default\s+hello-test-node\s+\S+\s+file\s+\S+\s+0/1\s+0\s`).MatchString(out)
		})
		if !strings.HasPrefix(out, "NAMESPACE  NAME") || !strings.Contains(errOut, "statusd") {
			t.Errorf("get pods: stdout\n%s\nstderr %s", out, errOut)
		}
		out, _, code = runCLI(t, "get", "pods", "--run-dir", runDir, "-o", "json")
		var list struct {
			Kind  string `json:"kind"`
			Items []struct {
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || list.Kind != "List" ||
			len(list.Items) != 1 || list.Items[0].Metadata.Name != "hello-test-node" {
			t.Errorf("get pods -o json: exit %d, err %v:\n%s", code, err, out)
		}
		checkWatch(t, runDir)
	case 1:
		if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "does not implement ListPods") {
			t.Errorf("get pods error %q", errOut)
		}
	default:
		t.Errorf("get pods exit %d: %s", code, errOut)
	}
	_, errOut, code = runCLI(t, "get", "node", "--run-dir", runDir)
	if code != 1 || !strings.Contains(errOut, "nodestatusd is not answering") {
		t.Errorf("get node without nodestatusd: exit %d, %q", code, errOut)
	}
}

// checkWatch reads the first event of `get pods --watch -o json`: the static
// pod, ADDED from the file source.
func checkWatch(t *testing.T, runDir string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "microlet"), "get", "pods", "--watch", "-o", "json", "--run-dir", runDir)
	var errOut testenv.LockedBuffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("get pods --watch: %v; stderr %s", err, errOut.String())
	}
	var ev struct {
		Type   string `json:"type"`
		Source string `json:"source"`
		Object struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"object"`
	}
	if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Type != "ADDED" || ev.Source != "file" || ev.Object.Metadata.Name != "hello-test-node" {
		t.Errorf("first watch event %q (err %v), want the static pod ADDED from file", line, err)
	}
}

// TestStopKillsAfterDeadline: a service that ignores SIGTERM is killed once
// --stop-timeout passes, and the rest still stop in order.
func TestStopKillsAfterDeadline(t *testing.T) {
	t.Parallel()
	bins := t.TempDir()
	for _, c := range components.All {
		if c.Name == components.PodSyncd {
			continue
		}
		if err := os.Symlink(filepath.Join(binDir, c.Name), filepath.Join(bins, c.Name)); err != nil {
			t.Fatal(err)
		}
	}
	// A stand-in podsyncd (nothing depends on it) that ignores SIGTERM; its
	// sleep inherits the ignored signal, so only SIGKILL of the group ends both.
	stubborn := "#!/bin/sh\ntrap '' TERM\necho 'ignoring SIGTERM' >&2\nwhile :; do sleep 1; done\n"
	if err := os.WriteFile(filepath.Join(bins, components.PodSyncd), []byte(stubborn), 0o755); err != nil {
		t.Fatal(err)
	}
	runDir := shortDir(t)
	r := startMicrolet(t, runDir, "--bin-dir", bins, "--stop-timeout", "1s")
	var pid int
	eventually(t, "the stand-in podsyncd started", func() bool {
		for _, c := range status(t, runDir).Components {
			if c.Name == components.PodSyncd {
				pid = c.PID
			}
		}
		return pid != 0 && strings.Contains(r.stderr.String(), "ignoring SIGTERM")
	})
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := r.waitExit(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
	log := r.stderr.String()
	if !regexp.MustCompile(`msg="service did not stop in time; killing it" .*component=podsyncd`).MatchString(log) ||
		!regexp.MustCompile(`msg="service stopped" .*component=podsyncd .*exit="signal: killed"`).MatchString(log) {
		t.Errorf("podsyncd was not killed after the deadline; log:\n%s", log)
	}
	if stopped := logOrder(log, "service stopped"); len(stopped) != len(components.All) || stopped[0] != components.PodSyncd {
		t.Errorf("stop order %v", stopped)
	}
	if pidAlive(pid) {
		t.Errorf("stand-in podsyncd (pid %d) survived", pid)
	}
	if left := sockets(t, runDir); len(left) > 0 {
		t.Errorf("sockets left: %v", left)
	}
}
