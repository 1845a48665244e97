package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// TestPodEphemeralContainers adds ephemeral containers to a running pod the
// way `kubectl debug` does (the pods/ephemeralcontainers subresource) and
// checks, through the API server, kubectl and the kubelet API (nodeapi),
// what the kubelet guarantees: the container starts in the existing
// sandbox, is reported in status.ephemeralContainerStatuses, shares the
// target container's process namespace, serves exec, logs and attach, is
// never restarted after it exits, and dies with the pod.
func TestPodEphemeralContainers(t *testing.T) {
	kubectlBin := controlplane.Kubectl(t)
	// Container GC every 2 s, so the interval counted below spans several
	// passes; podsyncd serves the metrics it is counted with.
	podsyncdMetrics := freeLoopbackAddr(t)
	s := startStack(t, "--container-gc-period=2s", "--metrics-addr="+podsyncdMetrics)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()
	kubectl := func(t *testing.T, stdin io.Reader, args ...string) (string, string, int) {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cmd := s.CP.KubectlCommand(cctx, kubectlBin, args...)
		var out, errb bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return out.String(), errb.String(), code
	}
	kubectlOK := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errOut, code := kubectl(t, nil, args...)
		if code != 0 {
			t.Fatalf("kubectl %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	pods := s.admin.CoreV1().Pods("default")
	// addEphemeral appends ec through the subresource, on the newest copy.
	addEphemeral := func(t *testing.T, ec corev1.EphemeralContainer) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := pods.Get(ctx, "eph-target", metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, ec)
			_, err = pods.UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("add ephemeral container %s: %v", ec.Name, err)
		}
	}
	ephemeral := func(p *corev1.Pod, name string) *corev1.ContainerStatus {
		for i := range p.Status.EphemeralContainerStatuses {
			if p.Status.EphemeralContainerStatuses[i].Name == name {
				return &p.Status.EphemeralContainerStatuses[i]
			}
		}
		return nil
	}
	ephemeralRunning := func(name string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			cs := ephemeral(p, name)
			return cs != nil && cs.State.Running != nil
		}
	}
	ephemeralTerminated := func(name string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			cs := ephemeral(p, name)
			return cs != nil && cs.State.Terminated != nil
		}
	}

	// The target's PID 1 is "sleep 3607": in the debugger's namespace it
	// must be that process, in a container of its own namespace not.
	target := s.Pod("eph-target", corev1.RestartPolicyAlways, "exec sleep 3607")
	grace := int64(2)
	target.Spec.TerminationGracePeriodSeconds = &grace
	s.Create(target)
	p := s.WaitPod("default", "eph-target", "running and Ready", ready)
	uid := string(p.UID)

	addEphemeral(t, corev1.EphemeralContainer{
		EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:                  []string{"/bin/sh", "-c", `echo "polo $(tr '\0' ' ' </proc/1/cmdline)"; while [ ! -f /tmp/stop ]; do sleep 1; done; exit 3`},
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		},
		TargetContainerName: "main",
	})

	var debuggerID string
	t.Run("ephemeralContainerStatuses reports it running; the pod is unchanged", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "eph-target", "with debugger running", ephemeralRunning("debugger"))
		cs := ephemeral(p, "debugger")
		debuggerID = cs.ContainerID
		if !strings.HasPrefix(cs.ContainerID, "docker://") || cs.Image != s.image || cs.ImageID == "" {
			t.Errorf("containerID %q image %q imageID %q; want docker://<id>, %s and the image's ID", cs.ContainerID, cs.Image, cs.ImageID, s.image)
		}
		if cs.Ready || cs.RestartCount != 0 {
			t.Errorf("ready %v restartCount %d; an ephemeral container is never ready and never restarted", cs.Ready, cs.RestartCount)
		}
		if p.Status.Phase != corev1.PodRunning || !ready(p) || len(p.Status.ContainerStatuses) != 1 {
			t.Errorf("phase %s ready %v containerStatuses %d; the pod must stay Running and Ready with its one container", p.Status.Phase, ready(p), len(p.Status.ContainerStatuses))
		}
	})

	t.Run("it shares the target's process namespace (kubectl exec)", func(t *testing.T) {
		if got := kubectlOK(t, "exec", "eph-target", "-c", "debugger", "--", "cat", "/proc/1/cmdline"); got != "sleep\x003607\x00" {
			t.Errorf("PID 1 seen by the debugger: %q, want the target's sleep 3607", got)
		}
		if got := kubectlOK(t, "exec", "eph-target", "-c", "debugger", "--", "ps", "-o", "pid,args"); !strings.Contains(got, "sleep 3607") || !strings.Contains(got, "/bin/sh -c echo") {
			t.Errorf("ps in the debugger does not list the target's and its own processes:\n%s", got)
		}
		if got := kubectlOK(t, "exec", "eph-target", "-c", "debugger", "--", "/bin/echo", "marco"); !strings.Contains(got, "marco") {
			t.Errorf("echo marco: %q", got)
		}
	})

	t.Run("kubectl logs -c reads its log through nodeapi", func(t *testing.T) {
		if got := kubectlOK(t, "logs", "eph-target", "-c", "debugger"); !strings.Contains(got, "polo sleep 3607 ") {
			t.Errorf("logs of the debugger: %q, want polo and the target's command line", got)
		}
	})

	t.Run("after it exits it is terminated and never restarted", func(t *testing.T) {
		s.t = t
		kubectlOK(t, "exec", "eph-target", "-c", "debugger", "--", "touch", "/tmp/stop")
		p := s.WaitPod("default", "eph-target", "with debugger terminated", ephemeralTerminated("debugger"))
		term := ephemeral(p, "debugger").State.Terminated
		if term.ExitCode != 3 || term.Reason != "Error" || term.ContainerID != debuggerID {
			t.Errorf("terminated %+v; want exit 3, Error, %s", term, debuggerID)
		}
		// A second ephemeral container, without a target, proves the pod
		// was synced again after the first one exited (restartPolicy is
		// Always, so a regular container would have been restarted).
		// It is the conformance spec's container: stdin and a TTY.
		addEphemeral(t, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger2", Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:                  []string{"/bin/sh", "-c", "while true; do echo polo2; sleep 2; done"},
			Stdin:                    true,
			TTY:                      true,
			TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}})
		p = s.WaitPod("default", "eph-target", "with debugger2 running", ephemeralRunning("debugger2"))
		if cs := ephemeral(p, "debugger"); cs.State.Terminated == nil || cs.ContainerID != debuggerID || cs.RestartCount != 0 {
			t.Errorf("debugger after another sync: %+v; want still terminated, same container, no restart", cs)
		}
		if n := s.criContainers(uid, "debugger"); n != 1 {
			t.Errorf("the runtime has %d instances of debugger, want 1", n)
		}
		if got := kubectlOK(t, "exec", "eph-target", "-c", "debugger2", "--", "cat", "/proc/1/cmdline"); !strings.HasPrefix(got, "/bin/sh\x00-c\x00while true") {
			t.Errorf("PID 1 of an ephemeral container without a target: %q, want its own shell", got)
		}
		testenv.Eventually(t, "debugger2's TTY output in its log", time.Minute, func() error {
			out, errOut, code := kubectl(t, nil, "logs", "eph-target", "-c", "debugger2")
			if code != 0 || !strings.Contains(out, "polo2") {
				return fmt.Errorf("exit %d: %q %s", code, out, errOut)
			}
			return nil
		})
		sub := &corev1.Pod{}
		err := s.admin.CoreV1().RESTClient().Get().Namespace("default").Resource("pods").Name("eph-target").SubResource("ephemeralcontainers").Do(ctx).Into(sub)
		if err != nil || len(sub.Spec.EphemeralContainers) != 2 {
			t.Errorf("pods/ephemeralcontainers: %v, %d containers, want 2", err, len(sub.Spec.EphemeralContainers))
		}
	})

	t.Run("kubectl debug -i --target attaches to a shell in the target's namespace", func(t *testing.T) {
		s.t = t
		// Stdin stays open until kubectl is done, as a terminal's would:
		// closing it first ends the attach session (Docker's and
		// containerd's rule for a container without stdinOnce) before the
		// shell's answer is streamed back.
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := io.WriteString(w, "echo attached; tr '\\0' ' ' </proc/1/cmdline; echo; exit 0\n"); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := kubectl(t, r, "debug", "-i", "eph-target", "--image="+s.image, "--image-pull-policy=IfNotPresent", "--target=main", "-c", "shell", "--", "sh")
		_ = r.Close()
		if code != 0 || !strings.Contains(out, "attached\nsleep 3607 \n") {
			t.Fatalf("kubectl debug: exit %d\nstdout: %q\nstderr: %s", code, out, errOut)
		}
		p := s.WaitPod("default", "eph-target", "with shell terminated", ephemeralTerminated("shell"))
		if term := ephemeral(p, "shell").State.Terminated; term.ExitCode != 0 || term.Reason != "Completed" {
			t.Errorf("shell terminated %+v, want exit 0 Completed", term)
		}
	})

	t.Run("a new sandbox does not start them again", func(t *testing.T) {
		s.t = t
		before, err := pods.Get(ctx, "eph-target", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The sandbox dies (stopped behind podsyncd's back): the pod gets a
		// new one and its regular container starts again there.
		cc, err := grpcclient.Dial(components.Endpoint(s.runDir, components.RuntimeShim))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		rt := runtimeapi.NewRuntimeServiceClient(cc)
		sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid}}})
		if err != nil || len(sbs.Items) != 1 {
			t.Fatalf("sandboxes of the pod: %v, %v", sbs, err)
		}
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sbs.Items[0].Id}); err != nil {
			t.Fatal(err)
		}
		mainID := before.Status.ContainerStatuses[0].ContainerID
		s.WaitPod("default", "eph-target", "main running again in a new sandbox", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Running != nil && cs[0].ContainerID != mainID && ready(p)
		})
		s.WaitPod("default", "eph-target", "debugger2 terminated by the sandbox's death", ephemeralTerminated("debugger2"))
		// A new ephemeral container starts in the new sandbox; the old ones
		// must not, on this sync or later ones. Counted, not watched: over
		// an interval that podsyncd's own counters show spanned several pod
		// worker passes (resync every 5 s, PLEG events) and container GC
		// passes (every 2 s here; the one that could remove the old sandbox
		// and with it their history), podsyncd must start no container and
		// ask the runtime to create none. With none created, each old
		// instance present at the end was present throughout.
		addEphemeral(t, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger3", Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"sleep", "3609"}, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		}})
		s.WaitPod("default", "eph-target", "with debugger3 running", ephemeralRunning("debugger3"))
		count0 := scrapeCounters(t, podsyncdMetrics)
		var after counters
		testenv.Eventually(t, "3 pod worker passes and 3 container GC passes after debugger3 started", 2*time.Minute, func() error {
			after = scrapeCounters(t, podsyncdMetrics)
			if d := after.sub(count0); d.syncs < 3 || d.gcPasses < 3 {
				return fmt.Errorf("%v pod worker passes, %v GC passes so far", d.syncs, d.gcPasses)
			}
			return nil
		})
		d := after.sub(count0)
		t.Logf("over %v pod worker passes and %v container GC passes: %v containers started, %v CreateContainer calls, GC removed %v containers and %v sandboxes",
			d.syncs, d.gcPasses, d.starts, d.creates, d.gcContainers, d.gcSandboxes)
		if d.starts != 0 || d.creates != 0 {
			t.Errorf("%v container starts and %v CreateContainer calls after debugger3 ran, want 0 (nothing of the pod restarts)", d.starts, d.creates)
		}
		for _, name := range []string{"debugger", "debugger2", "shell"} {
			if n := s.criContainers(uid, name); n != 1 {
				t.Errorf("the runtime has %d instances of %s after a new sandbox, want its one old instance", n, name)
			}
		}
		p, err := pods.Get(ctx, "eph-target", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"debugger", "debugger2", "shell"} {
			if cs := ephemeral(p, name); cs == nil || cs.State.Terminated == nil || cs.RestartCount != 0 {
				t.Errorf("%s after the new sandbox: %+v, want terminated, never restarted", name, cs)
			}
		}
		if cs := ephemeral(p, "debugger"); cs != nil && cs.ContainerID != debuggerID {
			t.Errorf("debugger's status names %s, want its only instance %s", cs.ContainerID, debuggerID)
		}
	})

	t.Run("the pod's deletion kills them", func(t *testing.T) {
		s.t = t
		if err := pods.Delete(ctx, "eph-target", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		s.WaitGone("default", "eph-target")
		if n := s.dockerRunning(uid); n != 0 {
			t.Errorf("%d containers of the deleted pod still run", n)
		}
	})
}

// counters are what podsyncd's /metrics counts: pod worker passes
// (kubelet_pod_worker_duration_seconds), container starts and CRI
// CreateContainer calls, container GC passes and their removals.
type counters struct {
	syncs, starts, creates, gcPasses, gcContainers, gcSandboxes float64
}

func (c counters) sub(o counters) counters {
	return counters{c.syncs - o.syncs, c.starts - o.starts, c.creates - o.creates,
		c.gcPasses - o.gcPasses, c.gcContainers - o.gcContainers, c.gcSandboxes - o.gcSandboxes}
}

// scrapeCounters reads counters from podsyncd's --metrics-addr.
func scrapeCounters(t testing.TB, podsyncdAddr string) counters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := testenv.ScrapeMetrics(ctx, "http://"+podsyncdAddr+"/metrics")
	if err != nil {
		t.Fatalf("podsyncd metrics: %v", err)
	}
	return counters{
		syncs:        float64(m.Count("kubelet_pod_worker_duration_seconds", nil)),
		starts:       m.Sum("kubelet_started_containers_total", nil),
		creates:      m.Sum("kubelet_runtime_operations_total", map[string]string{"operation_type": "create_container"}),
		gcPasses:     m.Sum("microlet_podsyncd_container_gc_passes_total", map[string]string{"result": "success"}),
		gcContainers: m.Sum("microlet_podsyncd_container_gc_removed_total", map[string]string{"object": "container"}),
		gcSandboxes:  m.Sum("microlet_podsyncd_container_gc_removed_total", map[string]string{"object": "sandbox"}),
	}
}

// criContainers counts a pod's instances of one container, in any state,
// through the stack's CRI socket.
func (s *stack) criContainers(uid, name string) int {
	s.t.Helper()
	ctx, rt, done := s.runtimeClient(30 * time.Second)
	defer done()
	resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": name},
	}})
	if err != nil {
		s.t.Fatal(fmt.Errorf("CRI ListContainers: %w", err))
	}
	return len(resp.Containers)
}
