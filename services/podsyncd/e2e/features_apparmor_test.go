package e2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/admission"
)

// TestAppArmorAdmission runs issue 35 on the real stack: on a host without
// AppArmor, a pod asking for the RuntimeDefault profile (pod-level field,
// or the deprecated per-container annotation) is refused at admission,
// Failed with reason AppArmor, and the runtime never gets a sandbox or a
// container for it; a pod asking for Unconfined runs. On a host with
// AppArmor the same pods all run.
func TestAppArmorAdmission(t *testing.T) {
	s := startStack(t)
	hostErr := admission.KernelAppArmor{}.AppArmorSupport()

	field := s.Pod("aa-field", corev1.RestartPolicyNever, "sleep 3600")
	field.Spec.SecurityContext = &corev1.PodSecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}}
	annotated := s.Pod("aa-annotation", corev1.RestartPolicyNever, "sleep 3600")
	annotated.Annotations = map[string]string{corev1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "main": corev1.DeprecatedAppArmorBetaProfileRuntimeDefault}
	unconfined := s.Pod("aa-unconfined", corev1.RestartPolicyNever, "sleep 3600")
	unconfined.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
	confined := []*corev1.Pod{s.Create(field), s.Create(annotated)}
	s.Create(unconfined)

	running := func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}
	if hostErr == nil {
		t.Logf("this host enforces AppArmor: every pod must run")
		for _, p := range append(confined, unconfined) {
			s.WaitPod("default", p.Name, "running", running)
		}
		return
	}
	t.Logf("this host cannot enforce AppArmor (%v): the confined pods must be refused", hostErr)
	for _, p := range confined {
		got := s.WaitPod("default", p.Name, "Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
		const want = "Pod was rejected: Cannot enforce AppArmor: AppArmor is not enabled on the host"
		if got.Status.Reason != admission.AppArmorReason || got.Status.Message != want {
			t.Errorf("%s: reason %q message %q, want %s / %s", p.Name, got.Status.Reason, got.Status.Message, admission.AppArmorReason, want)
		}
		if msg := warningEvent(s.Node, p.Name, admission.AppArmorReason); msg != strings.TrimPrefix(want, admission.RejectedMessagePrefix) {
			t.Errorf("%s: AppArmor event message %q", p.Name, msg)
		}
		for _, cs := range got.Status.ContainerStatuses {
			if cs.State.Running != nil || cs.State.Terminated != nil || cs.ContainerID != "" {
				t.Errorf("%s: container %s has a state %+v / ID %q, want none started", p.Name, cs.Name, cs.State, cs.ContainerID)
			}
		}
	}
	// The unconfined pod running shows that the loop went on past the
	// refusals; the refused pods must still have nothing in the runtime.
	s.WaitPod("default", "aa-unconfined", "running", running)
	for _, p := range confined {
		if sandboxes, containers := s.criObjects(string(p.UID)); sandboxes+containers != 0 {
			t.Errorf("%s: the runtime has %d sandboxes and %d containers of a refused pod, want none", p.Name, sandboxes, containers)
		}
	}
}

// criObjects counts the sandboxes and containers, in any state, of a pod
// UID, asked through the stack's CRI socket.
func (s *stack) criObjects(uid string) (sandboxes, containers int) {
	s.t.Helper()
	ctx, rt, done := s.runtimeClient(30 * time.Second)
	defer done()
	labels := map[string]string{"io.kubernetes.pod.uid": uid}
	sb, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{LabelSelector: labels}})
	if err != nil {
		s.t.Fatalf("CRI ListPodSandbox: %v", err)
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{LabelSelector: labels}})
	if err != nil {
		s.t.Fatalf("CRI ListContainers: %v", err)
	}
	return len(sb.Items), len(cs.Containers)
}
