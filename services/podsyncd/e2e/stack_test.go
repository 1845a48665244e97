package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/registry"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// binaries builds microlet and every service once per test binary.
func binaries(t testing.TB) string {
	t.Helper()
	pkgs := []string{"github.com/microlet/microlet/cmd/microlet"}
	for _, c := range components.All {
		pkgs = append(pkgs, "github.com/microlet/microlet/services/"+c.Name)
	}
	return testenv.Build(t, nil, pkgs...)
}

// stack is one node: `microlet run` with every service, connected.
type stack struct {
	t           testing.TB
	node        string
	runDir      string
	manifestDir string
	logDir      string
	instance    string
	admin       kubernetes.Interface
	image       string
	bins        string // directory of the built binaries
	cmd         *exec.Cmd
	out         *testenv.LockedBuffer
	done        chan struct{}
}

// startStack starts a node; podsyncdArgs are added to podsyncd's flags.
func startStack(t testing.TB, podsyncdArgs ...string) *stack {
	t.Helper()
	cp := controlplane.Get(t)
	bins := binaries(t)
	reg := registry.Start(t)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{
		t: t, node: "e2e-" + rand.String(5), runDir: filepath.Join(dir, "run"), manifestDir: filepath.Join(dir, "manifests"),
		logDir: filepath.Join(dir, "logs"), instance: "e2e-" + rand.String(8), admin: admin,
		image: reg.Image(registry.Busybox), bins: bins, out: &testenv.LockedBuffer{}, done: make(chan struct{}),
	}
	for _, d := range []string{s.runDir, s.manifestDir, s.logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	extra := ""
	for _, a := range podsyncdArgs {
		extra += fmt.Sprintf(", %q", a)
	}
	cfg := fmt.Sprintf(`args:
  podsyncd: ["--pod-logs-dir=%s", "--crashloop-backoff-initial=2s", "--crashloop-backoff-max=20s", "--resync-period=5s"%s]
  runtime-shim: ["--docker-instance=%s"]
`, s.logDir, extra, s.instance)
	cfgPath := filepath.Join(dir, "microlet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(filepath.Join(bins, "microlet"), "run", "--config", cfgPath,
		"--run-dir", s.runDir, "--data-dir", filepath.Join(dir, "data"), "--node-name", s.node,
		"--kubeconfig", cp.NodeKubeconfig(s.node), "--manifest-dir", s.manifestDir, "--bin-dir", bins)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(60 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		if t.Failed() {
			out := s.out.String()
			if len(out) > 60000 {
				out = out[len(out)-60000:]
			}
			t.Logf("microlet output (tail):\n%s", out)
		}
		removeDockerObjects(s.instance)
		_ = os.RemoveAll(dir)
	})
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cc, err := grpcclient.Dial(components.Endpoint(s.runDir, components.PodSyncd))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := grpcclient.WaitServing(wctx, cc, ""); err != nil {
		t.Fatalf("podsyncd never served: %v\n%s", err, s.out.String())
	}
	s.waitNodeReady()
	return s
}

// removeDockerObjects deletes every container the test's shim created.
func removeDockerObjects(instance string) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=io.microlet.instance="+instance).Output()
	if err != nil {
		return
	}
	ids := strings.Fields(string(out))
	if len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
}

func (s *stack) waitNodeReady() {
	s.eventually("node Ready", 3*time.Minute, func() (bool, string) {
		n, err := s.admin.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Message
			}
		}
		return false, "no Ready condition"
	})
}

// eventually polls cond every 250 ms until it holds or the deadline passes.
func (s *stack) eventually(what string, limit time.Duration, cond func() (bool, string)) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(250 * time.Millisecond)
	}
	s.t.Fatalf("timed out after %s waiting for %s; last: %s", limit, what, last)
}

func (s *stack) pod(name string, policy corev1.RestartPolicy, script string) *corev1.Pod {
	no := false
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      s.node,
			RestartPolicy:                 policy,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", script},
			}},
		},
	}
}

func (s *stack) create(p *corev1.Pod) *corev1.Pod {
	s.t.Helper()
	got, err := s.admin.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	return got
}

func (s *stack) get(ns, name string) (*corev1.Pod, error) {
	return s.admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
}

func (s *stack) waitPod(ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	s.t.Helper()
	var got *corev1.Pod
	s.eventually(fmt.Sprintf("pod %s/%s %s", ns, name, what), 8*time.Minute, func() (bool, string) {
		p, err := s.get(ns, name)
		if err != nil {
			return false, err.Error()
		}
		got = p
		return cond(p), fmt.Sprintf("phase=%s reason=%s containers=%+v", p.Status.Phase, p.Status.Reason, p.Status.ContainerStatuses)
	})
	return got
}

func (s *stack) waitGone(ns, name string) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("pod %s/%s deleted", ns, name), 8*time.Minute, func() (bool, string) {
		_, err := s.get(ns, name)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprint(err)
	})
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dockerRunning counts the running containers of a pod UID, asked through the
// stack's CRI socket (the contract), so it holds for any runtime behind it.
func (s *stack) dockerRunning(uid string) int {
	s.t.Helper()
	cc, err := grpcclient.Dial(components.Endpoint(s.runDir, components.RuntimeShim))
	if err != nil {
		s.t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(cc).ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid},
	}})
	if err != nil {
		s.t.Fatalf("CRI ListContainers: %v", err)
	}
	return len(resp.Containers)
}

// watchNodeReady fails the test if the Node ever reports NotReady after now.
func (s *stack) watchNodeReady(ctx context.Context) func() {
	// Report on the test that asked, not on whatever subtest s.t is by then.
	parent := s.t
	var mu sync.Mutex
	var flapped string
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n, err := s.admin.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
			if err != nil {
				continue
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					mu.Lock()
					flapped = fmt.Sprintf("%s: %s %s", time.Now().Format(time.RFC3339), c.Reason, c.Message)
					mu.Unlock()
				}
			}
		}
	}()
	return func() {
		close(stop)
		mu.Lock()
		defer mu.Unlock()
		if flapped != "" {
			parent.Errorf("node went NotReady during the test: %s", flapped)
		}
	}
}
