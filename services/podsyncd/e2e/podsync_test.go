package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestPodSync runs the scenarios against one node stack.
func TestPodSync(t *testing.T) {
	// The deleted API pod's log is read after it is gone; container GC
	// removes a gone pod's log dir (as the kubelet's), so not in this test.
	s := startStack(t, "--container-gc-period=1h")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()

	t.Run("static pod runs, gets a Running mirror pod, and goes with its file", func(t *testing.T) {
		s.t = t
		p := s.Pod("static-web", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 1; done")
		p.Spec.NodeName = ""
		p.Namespace = ""
		p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		data, err := yaml.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(s.manifestDir, "static-web.yaml")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		mirrorName := "static-web-" + s.node
		mirror := s.WaitPod("default", mirrorName, "Running and Ready", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && ready(p)
		})
		if mirror.Annotations["kubernetes.io/config.mirror"] == "" {
			t.Fatalf("mirror pod lacks the config.mirror annotation: %v", mirror.Annotations)
		}
		uid := mirror.Annotations["kubernetes.io/config.hash"]
		if n := s.dockerRunning(uid); n < 1 {
			t.Fatalf("no running container for static pod uid %s", uid)
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		s.WaitGone("default", mirrorName)
		s.Eventually("static pod containers stopped", 2*time.Minute, func() (bool, string) {
			n := s.dockerRunning(uid)
			return n == 0, fmt.Sprintf("%d running", n)
		})
	})

	t.Run("mirror pod lifecycle: graceful mirror deletion, manifest rewritten, manifest changed", func(t *testing.T) {
		s.t = t
		file := filepath.Join(s.manifestDir, "static-life.yaml")
		write := func(script string) {
			t.Helper()
			p := s.Pod("static-life", corev1.RestartPolicyAlways, script)
			p.Spec.NodeName, p.Namespace = "", ""
			p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
			grace := int64(20)
			p.Spec.TerminationGracePeriodSeconds = &grace
			data, err := yaml.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// SIGTERM is ignored: the old pod runs its whole grace period.
		oldScript := "trap 'echo term' TERM; while true; do sleep 1; done"
		write(oldScript)
		name := "static-life-" + s.node
		running := func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) }
		first := s.WaitPod("default", name, "Running and Ready", running)
		hash := first.Annotations["kubernetes.io/config.mirror"]

		// Deleted gracefully by someone: the node replaces it.
		if err := s.admin.CoreV1().Pods("default").Delete(context.Background(), name, *metav1.NewDeleteOptions(30)); err != nil {
			t.Fatal(err)
		}
		s.WaitPod("default", name, "a new Running mirror pod", func(p *corev1.Pod) bool {
			return p.UID != first.UID && p.DeletionTimestamp == nil && running(p)
		})

		// The manifest deleted and written back unchanged: same pod, restarted.
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		write(oldScript)
		second := s.WaitPod("default", name, "Running with restart count 1", func(p *corev1.Pod) bool {
			return running(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1
		})
		if got := second.Annotations["kubernetes.io/config.mirror"]; got != hash {
			t.Fatalf("mirror hash %s after the rewrite, want %s", got, hash)
		}

		// The manifest changed: the new pod (a new UID, the same name)
		// starts only once the old one has stopped, as the kubelet's pod
		// workers serialize static pods of one full name, so a
		// host-network static pod never meets its predecessor on its
		// ports. While the old pod runs its grace period out (it ignores
		// SIGTERM), its mirror pod stays and shows it and nothing of the
		// new pod runs; then the new pod's mirror pod replaces it.
		write("trap 'exit 0' TERM; echo new; while true; do sleep 1; done")
		var newHash string
		oldSeen := 0 // looks that saw the old pod still running
		s.Eventually("the old static pod stopped, then the new one running", 2*time.Minute, func() (bool, string) {
			oldRunning := s.dockerRunning(hash) > 0
			for _, u := range s.runningPodUIDs() {
				if u != hash && s.dockerRunning(u) > 0 {
					if oldRunning {
						t.Fatalf("the new static pod %s runs beside the old one %s", u, hash)
					}
					newHash = u
					return true, ""
				}
			}
			if oldRunning {
				oldSeen++
				pods, err := s.admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				if pods.UID != second.UID || pods.Annotations["kubernetes.io/config.mirror"] != hash {
					t.Fatalf("the old pod's mirror pod replaced while it runs: uid %s (was %s), hash %s",
						pods.UID, second.UID, pods.Annotations["kubernetes.io/config.mirror"])
				}
			}
			return false, fmt.Sprintf("old pod running: %v; new pod not running yet", oldRunning)
		})
		if oldSeen == 0 {
			t.Fatal("the old static pod had stopped before the first look: its grace period is too short for this machine to see the new pod wait")
		}
		s.WaitPod("default", name, "the new pod's mirror pod, Running", func(p *corev1.Pod) bool {
			return p.Annotations["kubernetes.io/config.mirror"] == newHash && running(p)
		})
		if n := s.dockerRunning(hash); n != 0 {
			t.Fatalf("the old static pod still has %d running containers after its mirror pod was replaced", n)
		}
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		s.WaitGone("default", name)
	})

	t.Run("API pod runs; deletion runs preStop, stops gracefully and removes the pod", func(t *testing.T) {
		s.t = t
		p := s.Pod("api-pod", corev1.RestartPolicyAlways, "trap 'echo got-term; exit 0' TERM; echo started; while true; do sleep 1; done")
		p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
			Exec: &corev1.ExecAction{Command: []string{"/bin/sh", "-c", "echo prestop-ran > /proc/1/fd/1"}},
		}}
		created := s.Create(p)
		running := s.WaitPod("default", "api-pod", "Running", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && ready(p)
		})
		if running.Status.PodIP == "" || running.Status.StartTime == nil {
			t.Fatalf("status lacks podIP or startTime: %+v", running.Status)
		}
		if n := s.dockerRunning(string(created.UID)); n != 1 {
			t.Fatalf("runtime shows %d running containers for the pod, want 1", n)
		}
		// The kubelet's /var/log/containers symlink, to the CRI log.
		_, id, _ := strings.Cut(running.Status.ContainerStatuses[0].ContainerID, "://")
		link := filepath.Join(s.Dir, "containers", fmt.Sprintf("api-pod_default_main-%s.log", id))
		if target, err := os.Readlink(link); err != nil || target != filepath.Join(s.logDir, fmt.Sprintf("default_api-pod_%s", created.UID), "main", "0.log") {
			t.Fatalf("container log symlink %s -> %q (%v), want the CRI log", link, target, err)
		}
		if err := s.admin.CoreV1().Pods("default").Delete(context.Background(), "api-pod", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		s.WaitGone("default", "api-pod")
		if n := s.dockerRunning(string(created.UID)); n != 0 {
			t.Fatalf("%d containers still running after deletion", n)
		}
		log := filepath.Join(s.logDir, fmt.Sprintf("default_api-pod_%s", created.UID), "main", "0.log")
		data, err := os.ReadFile(log)
		if err != nil {
			t.Fatalf("container log: %v", err)
		}
		for _, want := range []string{"started", "prestop-ran", "got-term"} {
			if !strings.Contains(string(data), want) {
				t.Fatalf("container log %s lacks %q (preStop then SIGTERM):\n%s", log, want, data)
			}
		}
	})

	t.Run("a failing container restarts with growing backoff and shows CrashLoopBackOff", func(t *testing.T) {
		s.t = t
		s.Create(s.Pod("crasher", corev1.RestartPolicyAlways, "echo crashing; exit 3"))
		sawCrashLoop := false
		p := s.WaitPod("default", "crasher", "restarted twice in CrashLoopBackOff", func(p *corev1.Pod) bool {
			if len(p.Status.ContainerStatuses) != 1 {
				return false
			}
			cs := p.Status.ContainerStatuses[0]
			if cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff" {
				sawCrashLoop = true
			}
			return sawCrashLoop && cs.RestartCount >= 2
		})
		cs := p.Status.ContainerStatuses[0]
		if cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 3 {
			t.Fatalf("last termination = %+v, want exit code 3", cs.LastTerminationState)
		}
		if p.Status.Phase != corev1.PodRunning {
			t.Fatalf("crash-looping pod phase = %s, want Running (upstream keeps it Running while it restarts)", p.Status.Phase)
		}
		_ = s.admin.CoreV1().Pods("default").Delete(context.Background(), "crasher", metav1.DeleteOptions{})
	})

	t.Run("restartPolicy Never leaves a failed container terminated and the pod Failed", func(t *testing.T) {
		s.t = t
		s.Create(s.Pod("never-fails", corev1.RestartPolicyNever, "exit 7"))
		p := s.WaitPod("default", "never-fails", "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		cs := p.Status.ContainerStatuses[0]
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 7 || cs.RestartCount != 0 {
			t.Fatalf("container status = %+v, want terminated with 7 and no restart", cs)
		}
	})

	t.Run("a pod whose containers all succeed ends Succeeded", func(t *testing.T) {
		s.t = t
		p := s.Pod("all-ok", corev1.RestartPolicyOnFailure, "echo done")
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "second", Image: s.image, Command: []string{"/bin/sh", "-c", "sleep 1"}})
		s.Create(p)
		got := s.WaitPod("default", "all-ok", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 || cs.State.Terminated.Reason != "Completed" {
				t.Fatalf("container %s: %+v, want Completed", cs.Name, cs.State)
			}
		}
	})

	t.Run("a pod asking for more CPU than the node has is rejected with OutOfcpu", func(t *testing.T) {
		s.t = t
		p := s.Pod("too-big", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000")}
		created := s.Create(p)
		got := s.WaitPod("default", "too-big", "rejected", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		if got.Status.Reason != "OutOfcpu" || !strings.HasPrefix(got.Status.Message, "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000000") ||
			got.Status.QOSClass != corev1.PodQOSBurstable {
			t.Fatalf("reason %q message %q QoS %q, want OutOfcpu with upstream's message, Burstable", got.Status.Reason, got.Status.Message, got.Status.QOSClass)
		}
		if msg := warningEvent(s.Node, "too-big", "OutOfcpu"); msg != strings.TrimPrefix(got.Status.Message, "Pod was rejected: ") {
			t.Fatalf("OutOfcpu event message %q, status message %q", msg, got.Status.Message)
		}
		if n := s.dockerRunning(string(created.UID)); n != 0 {
			t.Fatalf("rejected pod has %d running containers", n)
		}
	})

	t.Run("podsyncd killed with SIGKILL adopts running containers without restarting them", func(t *testing.T) {
		s.t = t
		// "witness" exits when told to; the new podsyncd restarting it is the
		// event proving it has relisted and synced this pod, and "main" must
		// come through that same sync untouched.
		p := s.Pod("survivor", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 1; done")
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: "witness", Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while [ ! -e /tmp/exit ]; do sleep 1; done; exit 1"},
		})
		s.Create(p)
		before := s.WaitPod("default", "survivor", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
		id := containerStatus(before, "main").ContainerID
		pid := s.servicePID("podsyncd")
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.Eventually("podsyncd restarted", 2*time.Minute, func() (bool, string) {
			np := s.servicePID("podsyncd")
			return np != 0 && np != pid, "pid " + strconv.Itoa(np)
		})
		s.execIn(before, "witness", "touch", "/tmp/exit")
		after := s.WaitPod("default", "survivor", "witness restarted by the new podsyncd", func(p *corev1.Pod) bool {
			w := containerStatus(p, "witness")
			return w != nil && w.RestartCount == 1 && w.State.Running != nil && ready(p)
		})
		cs := containerStatus(after, "main")
		if cs.ContainerID != id || cs.RestartCount != 0 || cs.State.Running == nil {
			t.Fatalf("container after podsyncd restart: id %s (was %s), restarts %d, state %+v", cs.ContainerID, id, cs.RestartCount, cs.State)
		}
		if n := s.dockerRunning(string(after.UID)); n != 2 {
			t.Fatalf("%d running containers for the pod, want main and witness", n)
		}
	})
}

// containerStatus is the pod's status of the named container, nil if none.
func containerStatus(p *corev1.Pod, container string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == container {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// servicePID asks `microlet status` for a service's pid.
func (s *stack) servicePID(name string) int {
	out, err := exec.Command(filepath.Join(s.bins, "microlet"), "status", "-o", "json", "--run-dir", s.runDir).Output()
	if err != nil {
		return 0
	}
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); err != nil {
		var wrapped struct {
			Components []map[string]any `json:"components"`
		}
		if json.Unmarshal(out, &wrapped) != nil {
			return 0
		}
		rows = wrapped.Components
	}
	for _, r := range rows {
		if r["name"] == name {
			if pid, ok := r["pid"].(float64); ok {
				return int(pid)
			}
		}
	}
	return 0
}
