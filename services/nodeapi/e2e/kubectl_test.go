package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// kubectl runs kubectl as the cluster admin and returns stdout, stderr and
// the exit code; stdin may be nil.
type kubectl struct {
	t   *testing.T
	bin string
	cp  *controlplane.ControlPlane
}

func (k kubectl) run(stdin io.Reader, args ...string) (string, string, int) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := k.cp.KubectlCommand(ctx, k.bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		k.t.Fatalf("kubectl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// on returns k reporting to t (a subtest).
func (k kubectl) on(t *testing.T) kubectl { k.t = t; return k }

// ok runs kubectl and fails the test unless it exits 0.
func (k kubectl) ok(args ...string) string {
	k.t.Helper()
	out, errOut, code := k.run(nil, args...)
	if code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func running(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil
}

// TestKubectl drives kubectl through the API server to one microlet node.
func TestKubectl(t *testing.T) {
	k := kubectl{t: t, bin: controlplane.Kubectl(t)}
	n := node.Start(t, node.Options{})
	k.cp = n.CP
	ctx := context.Background()

	t.Run("node advertises the port nodeapi serves", func(t *testing.T) {
		got, err := n.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if port := got.Status.DaemonEndpoints.KubeletEndpoint.Port; port != int32(servingPort(t, n)) {
			t.Fatalf("Node advertises port %d, nodeapi serves %d", port, servingPort(t, n))
		}
	})

	// A pod that logs five numbered lines on stdout and stderr, then idles.
	logger := n.Create(n.Pod("logger", corev1.RestartPolicyAlways,
		`for i in 1 2 3 4 5; do echo "out $i"; echo "err $i" >&2; done; exec sleep 3600`))
	n.WaitPod(logger.Namespace, logger.Name, "running", running)

	t.Run("logs", func(t *testing.T) {
		k := k.on(t)
		n.Eventually("five lines of each stream", time.Minute, func() (bool, string) {
			out := k.ok("logs", "logger")
			return strings.Count(out, "out ") == 5 && strings.Count(out, "err ") == 5, out
		})
		if out := k.ok("logs", "logger", "--tail=2"); strings.Count(out, "\n") != 2 || !strings.Contains(out, "5") {
			t.Errorf("--tail=2: %q", out)
		}
		stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z (out|err) \d$`)
		for _, line := range strings.Split(strings.TrimSpace(k.ok("logs", "logger", "--timestamps")), "\n") {
			if !stamp.MatchString(line) {
				t.Errorf("--timestamps line %q", line)
			}
		}
		if out := k.ok("logs", "logger", "--since=1h"); strings.Count(out, "\n") != 10 {
			t.Errorf("--since=1h: %q", out)
		}
		future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		if out := k.ok("logs", "logger", "--since-time="+future); out != "" {
			t.Errorf("--since-time in the future: %q", out)
		}
		if out := k.ok("logs", "logger", "--limit-bytes=6"); out != "out 1\n" && out != "err 1\n" {
			t.Errorf("--limit-bytes=6: %q", out)
		}
		_, errOut, code := k.run(nil, "logs", "logger", "--previous")
		if code == 0 || !strings.Contains(errOut, "previous terminated container") {
			t.Errorf("--previous of a container that never restarted: exit %d, %q", code, errOut)
		}
	})

	t.Run("logs -f until the container exits", func(t *testing.T) {
		k := k.on(t)
		p := n.Create(n.Pod("counter", corev1.RestartPolicyNever,
			`i=0; while [ $i -lt 20 ]; do i=$((i+1)); echo "tick $i"; sleep 0.2; done`))
		n.WaitPod(p.Namespace, p.Name, "started", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && (p.Status.ContainerStatuses[0].State.Running != nil || p.Status.ContainerStatuses[0].State.Terminated != nil)
		})
		// kubectl returns only when the stream ends, which nodeapi does when
		// the container exits.
		out := k.ok("logs", "-f", "counter")
		if !strings.HasSuffix(out, "tick 20\n") || strings.Count(out, "tick ") != 20 {
			t.Fatalf("logs -f: %q", out)
		}
	})

	t.Run("logs --previous after a restart", func(t *testing.T) {
		k := k.on(t)
		p := n.Pod("restarter", corev1.RestartPolicyAlways,
			`n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo "attempt $n"; sleep 3; exit 1`)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		n.Create(p)
		n.WaitPod(p.Namespace, p.Name, "restarted", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
		out := k.ok("logs", "restarter", "--previous")
		m := regexp.MustCompile(`^attempt (\d+)\n$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("--previous: %q", out)
		}
		prev, _ := strconv.Atoi(m[1])
		cur := k.ok("logs", "restarter")
		if cur != "" && cur == out {
			t.Errorf("current and previous logs are the same: %q", cur)
		}
		if prev < 1 {
			t.Errorf("previous attempt %d", prev)
		}
	})

	t.Run("exec with stdin and exit code", func(t *testing.T) {
		k := k.on(t)
		out, errOut, code := k.run(nil, "exec", "logger", "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3")
		if code != 3 || out != "to-out\n" || !strings.Contains(errOut, "to-err") {
			t.Errorf("exec: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		out, errOut, code = k.run(strings.NewReader("hello from stdin\n"), "exec", "-i", "logger", "--", "cat")
		if code != 0 || out != "hello from stdin\n" {
			t.Errorf("exec -i cat: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("exec -i -t through a terminal", func(t *testing.T) {
		k := k.on(t)
		if _, err := exec.LookPath("script"); err != nil {
			testenv.RequireOrSkip(t, "no script(1) to give kubectl a terminal (apt-get install bsdutils): %v", err)
		}
		// script(1) runs kubectl on a pseudo-terminal, as a user's shell would.
		kcmd := k.cp.KubectlCommand(ctx, k.bin, "exec", "-i", "-t", "logger", "--", "sh", "-c", "tty; stty size; exit 7")
		cmd := exec.Command("script", "-qefc", shellJoin(kcmd.Args), "/dev/null")
		cmd.Env = kcmd.Env
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		ee, _ := err.(*exec.ExitError)
		if ee == nil || ee.ExitCode() != 7 {
			t.Fatalf("exec -it: %v (want exit 7)\n%s", err, out)
		}
		if !strings.Contains(string(out), "/dev/pts/") {
			t.Errorf("exec -it: no terminal in the container:\n%s", out)
		}
	})

	t.Run("attach", func(t *testing.T) {
		k := k.on(t)
		p := n.Pod("attachee", corev1.RestartPolicyAlways, `while read line; do echo "got $line"; done`)
		p.Spec.Containers[0].Stdin = true
		n.Create(p)
		n.WaitPod(p.Namespace, p.Name, "running", running)
		// Keep stdin open until the answer arrives: closing it first would
		// end the session before the container's reply is streamed back.
		actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := k.cp.KubectlCommand(actx, k.bin, "attach", "-i", "attachee")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		if _, err := io.WriteString(stdin, "ping\n"); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "got ping\n" {
			t.Fatalf("attach -i: read %q (%v); stderr %s", line, err, errb.String())
		}
		_ = stdin.Close()
	})

	t.Run("cp both ways", func(t *testing.T) {
		k := k.on(t)
		dir := t.TempDir()
		src := filepath.Join(dir, "in.txt")
		want := bytes.Repeat([]byte("microlet cp\n"), 5000)
		if err := os.WriteFile(src, want, 0o644); err != nil {
			t.Fatal(err)
		}
		k.ok("cp", src, "default/logger:/tmp/in.txt")
		if got := k.ok("exec", "logger", "--", "wc", "-c", "/tmp/in.txt"); !strings.HasPrefix(strings.TrimSpace(got), strconv.Itoa(len(want))) {
			t.Errorf("size in the container: %q, want %d", got, len(want))
		}
		back := filepath.Join(dir, "back.txt")
		k.ok("cp", "default/logger:/tmp/in.txt", back)
		got, err := os.ReadFile(back)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("copied back %d bytes (err %v), want %d identical", len(got), err, len(want))
		}
	})

	t.Run("port-forward carries TCP", func(t *testing.T) {
		k := k.on(t)
		p := n.Pod("web", corev1.RestartPolicyAlways, `mkdir -p /www && echo "hello through port-forward" > /www/index.html && exec httpd -f -p 8080 -h /www`)
		n.Create(p)
		n.WaitPod(p.Namespace, p.Name, "running", running)
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cmd := k.cp.KubectlCommand(pctx, k.bin, "port-forward", "pod/web", "--address=127.0.0.1", ":8080")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cancel(); _ = cmd.Wait() }()
		// "Forwarding from 127.0.0.1:41234 -> 8080"
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil {
			t.Fatalf("port-forward said nothing: %v; stderr %s", err, errb.String())
		}
		m := regexp.MustCompile(`127\.0\.0\.1:(\d+) -> 8080`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("port-forward: %q", line)
		}
		for i := 0; i < 3; i++ { // several connections over one forward
			resp, err := http.Get("http://127.0.0.1:" + m[1] + "/")
			if err != nil {
				t.Fatalf("GET through the forward: %v; stderr %s", err, errb.String())
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if string(body) != "hello through port-forward\n" {
				t.Fatalf("body %q", body)
			}
		}
	})

	t.Run("bad requests through the API server", func(t *testing.T) {
		k := k.on(t)
		_, errOut, code := k.run(nil, "logs", "logger", "-c", "nosuch")
		if code == 0 || !strings.Contains(errOut, "nosuch") {
			t.Errorf("logs of a missing container: exit %d, %q", code, errOut)
		}
		_, errOut, code = k.run(nil, "exec", "nosuchpod", "--", "true")
		if code == 0 || !strings.Contains(errOut, "not found") {
			t.Errorf("exec in a missing pod: exit %d, %q", code, errOut)
		}
	})
}

// shellJoin quotes args for sh -c.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
