package soak

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestObserveReportsEachRestartOnce feeds the monitor a web pod's statuses:
// Ready, then its main container replaced, then seen again unchanged. The
// replacement is one violation naming the pod's events and the container's
// last termination, and the looks that follow add none.
func TestObserveReportsEachRestartOnce(t *testing.T) {
	web := func(id string, restarts int32, last *corev1.ContainerStateTerminated) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1", UID: types.UID("u1"), Labels: map[string]string{labelKind: "web"}},
			Status: corev1.PodStatus{
				Phase:      corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{
					Name: "main", ContainerID: id, RestartCount: restarts,
					State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
					LastTerminationState: corev1.ContainerState{Terminated: last},
				}},
			},
		}
	}
	v := newViolations()
	seen := map[types.UID]*podSeen{}
	asked := 0
	events := func(*corev1.Pod) string { asked++; return "\n    Warning Unhealthy: Liveness probe failed" }
	observe(web("docker://a", 0, nil), seen, v, events)
	observe(web("docker://a", 0, nil), seen, v, events)
	killed := &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error"}
	for range 3 {
		observe(web("docker://b", 1, killed), seen, v, events)
	}
	if got := v.total(); got != 1 {
		t.Fatalf("violations = %d, want 1 (one restart): %v", got, v.found)
	}
	if asked != 1 {
		t.Errorf("events asked %d times, want once (at the violation)", asked)
	}
	msg := v.found[invHealthy][0]
	for _, want := range []string{"web-1", "docker://a", "docker://b", "last{exited 137 Error", "Liveness probe failed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("violation %q does not name %q", msg, want)
		}
	}
	if v.checks[invHealthy] != 4 {
		t.Errorf("checks = %d, want 4 (every look after Ready)", v.checks[invHealthy])
	}
}
