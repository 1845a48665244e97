package podstatus

import (
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestEphemeralContainerStatuses: ephemeral container statuses are kept and
// normalised like regular ones (sorted by name, times in whole seconds),
// and, as in the kubelet's status manager, TerminatePod and the transition
// check leave them alone, while a running one still counts as a container
// that could run.
func TestEphemeralContainerStatuses(t *testing.T) {
	pod := testPod(corev1.RestartPolicyNever, "main")
	for _, n := range []string{"zdebug", "adebug"} {
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: n}})
	}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	in := &corev1.PodStatus{
		Phase:             corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{running("main")},
		EphemeralContainerStatuses: []corev1.ContainerStatus{
			{Name: "zdebug", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(300 * time.Millisecond))}}},
			terminated("adebug", 3),
		},
	}
	st, err := Prepare(pod, nil, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	eph := st.EphemeralContainerStatuses
	if len(eph) != 2 || eph[0].Name != "adebug" || eph[1].Name != "zdebug" {
		t.Fatalf("ephemeral statuses %+v, want both, sorted by name", eph)
	}
	if got := eph[1].State.Running.StartedAt.Time; !got.Equal(t0) {
		t.Errorf("StartedAt %v not truncated to %v", got, t0)
	}
	if !CouldHaveRunningContainers(&corev1.PodStatus{EphemeralContainerStatuses: []corev1.ContainerStatus{running("zdebug")}}, false) {
		t.Error("a running ephemeral container does not count as running")
	}

	term := Terminate(pod, &st)
	if term.EphemeralContainerStatuses[1].State.Running == nil || term.ContainerStatuses[0].State.Terminated == nil {
		t.Errorf("Terminate: ephemeral %+v, regular %+v; the kubelet marks regular containers only", term.EphemeralContainerStatuses[1].State, term.ContainerStatuses[0].State)
	}
	if m := Merge(pod, corev1.PodStatus{}, st, true); len(m.EphemeralContainerStatuses) != 2 {
		t.Errorf("Merge dropped ephemeral statuses: %+v", m.EphemeralContainerStatuses)
	}
}

// TestEphemeralMayNotLeaveTerminated: the API server's rule, checked before
// the status is taken, under every restart policy.
func TestEphemeralMayNotLeaveTerminated(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "main")
	old := &corev1.PodStatus{EphemeralContainerStatuses: []corev1.ContainerStatus{terminated("debug", 0)}}
	next := &corev1.PodStatus{EphemeralContainerStatuses: []corev1.ContainerStatus{running("debug")}}
	if err := CheckTransition(old, next, &pod.Spec); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("terminated -> running: %v, want ErrIllegalTransition", err)
	}
	if _, err := Prepare(pod, old, next, time.Now()); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("Prepare: %v, want ErrIllegalTransition", err)
	}
	if err := CheckTransition(next, old, &pod.Spec); err != nil {
		t.Fatalf("running -> terminated: %v", err)
	}
}
