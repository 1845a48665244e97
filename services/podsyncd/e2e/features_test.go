package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv/registry"
)

// TestPodFeatures runs issue 11's scenarios (probes, environment, volumes,
// security context) against one node stack.
func TestPodFeatures(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()
	webImage := strings.TrimSuffix(s.image, registry.Busybox) + registry.WebServer

	t.Run("httpGet readiness: Ready only once the server answers on the probed path", func(t *testing.T) {
		s.t = t
		p := s.pod("ready-web", corev1.RestartPolicyAlways, "")
		c := &p.Spec.Containers[0]
		c.Image = webImage
		// The page the readiness probe asks for appears only after a while.
		c.Command = []string{"sh", "-c", "(sleep 15; echo ok > /www/ready.html) & exec httpd -f -p 80 -h /www"}
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/ready.html", Port: intstr.FromString("http"),
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "e2e"}},
			}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		// A liveness probe that keeps succeeding must never restart it.
		c.LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
			PeriodSeconds: 2, FailureThreshold: 3,
		}
		s.create(p)
		notReady := s.waitPod("default", "ready-web", "Running, started and not Ready", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].State.Running != nil && !p.Status.ContainerStatuses[0].Ready && !ready(p)
		})
		if cond := condition(notReady, corev1.PodReady); cond == nil || cond.Reason != "ContainersNotReady" {
			t.Fatalf("Ready condition while the probe fails: %+v", cond)
		}
		got := s.waitPod("default", "ready-web", "Ready", func(p *corev1.Pod) bool {
			return ready(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
		})
		if n := got.Status.ContainerStatuses[0].RestartCount; n != 0 {
			t.Fatalf("restartCount = %d with a passing liveness probe, want 0", n)
		}
		if out := s.execIn(got, "main", "cat", "/www/ready.html"); out != "ok\n" {
			t.Fatalf("probed page = %q", out)
		}
		s.deletePod("ready-web")
	})

	t.Run("failing exec liveness probe restarts the container", func(t *testing.T) {
		s.t = t
		p := s.pod("live-exec", corev1.RestartPolicyAlways, "touch /tmp/healthy; sleep 8; rm /tmp/healthy; sleep 3600")
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/healthy"}}},
			PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 5,
		}
		grace := int64(2)
		p.Spec.Containers[0].LivenessProbe.TerminationGracePeriodSeconds = &grace
		s.create(p)
		got := s.waitPod("default", "live-exec", "restarted after failing liveness", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1 &&
				p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
		})
		if term := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; term.ExitCode == 0 {
			t.Fatalf("killed container reports exit code 0: %+v", term)
		}
		s.deletePod("live-exec")
	})
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// deletePod deletes a default-namespace pod at once and waits until it is gone.
func (s *stack) deletePod(name string) {
	s.t.Helper()
	zero := int64(0)
	if err := s.admin.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		s.t.Fatal(err)
	}
	s.waitGone("default", name)
}

// execIn runs a command in a pod's running container through the stack's CRI
// socket (ExecSync) and returns its stdout.
func (s *stack) execIn(p *corev1.Pod, container string, cmd ...string) string {
	s.t.Helper()
	id := ""
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			id = cs.ContainerID[strings.Index(cs.ContainerID, "://")+3:]
		}
	}
	if id == "" {
		s.t.Fatalf("pod %s has no container %s", p.Name, container)
	}
	cc, err := grpcclient.Dial(components.Endpoint(s.runDir, components.RuntimeShim))
	if err != nil {
		s.t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(cc).ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 30})
	if err != nil {
		s.t.Fatalf("ExecSync %v: %v", cmd, err)
	}
	if resp.ExitCode != 0 {
		s.t.Fatalf("ExecSync %v exited %d: %s%s", cmd, resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	return string(resp.Stdout)
}
