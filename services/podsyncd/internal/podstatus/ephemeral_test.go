package podstatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

func TestEphemeralStatuses(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways)
	for _, n := range []string{"running", "exited", "new", "failed"} {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: n, Image: "busybox"}})
	}
	rt := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{
		cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateRunning, 0, 0),
		cs("running", podruntime.StateRunning, 0, 0), cs("exited", podruntime.StateExited, 1, 0),
	}}
	reasons := map[string]podruntime.Reason{"failed": {Reason: "ErrImagePull", Message: "no such image"}}
	st := gen(p, rt, reasons, false)
	if st.Phase != corev1.PodRunning {
		t.Fatalf("phase %s: ephemeral containers must not count", st.Phase)
	}
	for _, c := range st.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("Ready %s: ephemeral containers must not count", c.Status)
		}
	}
	if len(st.EphemeralContainerStatuses) != 4 {
		t.Fatalf("ephemeral statuses %+v", st.EphemeralContainerStatuses)
	}
	byName := map[string]corev1.ContainerStatus{}
	for _, s := range st.EphemeralContainerStatuses {
		byName[s.Name] = s
		if s.Ready || s.Started != nil || s.Image != "busybox" {
			t.Errorf("%s: ready %v started %v image %q; want not ready, started unset, the spec's image", s.Name, s.Ready, s.Started, s.Image)
		}
	}
	if s := byName["running"]; s.State.Running == nil || s.ContainerID != "docker://running1" {
		t.Errorf("running: %+v", s)
	}
	// Under restartPolicy Always a regular container would be waiting to
	// restart; an ephemeral one is terminated for good.
	if s := byName["exited"]; s.State.Terminated == nil || s.State.Terminated.ExitCode != 1 || s.State.Terminated.Reason != "Error" || s.LastTerminationState.Terminated != nil {
		t.Errorf("exited: %+v", s)
	}
	if s := byName["new"]; s.State.Waiting == nil || s.State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("new: %+v", s)
	}
	if s := byName["failed"]; s.State.Waiting == nil || s.State.Waiting.Reason != "ErrImagePull" || s.State.Waiting.Message != "no such image" {
		t.Errorf("failed: %+v", s)
	}

	p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	rt.Containers = append(rt.Containers, cs("init", podruntime.StateExited, 0, 0))
	st = gen(p, rt, nil, false)
	for _, s := range st.EphemeralContainerStatuses {
		if s.Name == "new" && (s.State.Waiting == nil || s.State.Waiting.Reason != "PodInitializing") {
			t.Errorf("new in a pod with init containers: %+v, want PodInitializing as the kubelet says", s)
		}
	}
	if st := gen(pod(corev1.RestartPolicyAlways), rt, nil, false); st.EphemeralContainerStatuses != nil {
		t.Errorf("a pod without ephemeral containers has statuses %+v", st.EphemeralContainerStatuses)
	}
}

// TestEphemeralTerminatedStays: once terminated, an ephemeral container's
// status stays terminated even when the runtime lost the instance (removed
// with an old sandbox, a podsyncd restart with the API's copy as the only
// memory): the API server refuses it leaving the terminated state.
func TestEphemeralTerminatedStays(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways)
	p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
	old := corev1.ContainerStatus{Name: "debug", Image: "busybox", ContainerID: "docker://debug1",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error", ContainerID: "docker://debug1"}}}
	rt := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateRunning, 0, 0)}}
	check := func(name string, st corev1.PodStatus) {
		t.Helper()
		if len(st.EphemeralContainerStatuses) != 1 {
			t.Fatalf("%s: %+v", name, st.EphemeralContainerStatuses)
		}
		got := st.EphemeralContainerStatuses[0]
		if got.State.Terminated == nil || got.State.Terminated.ExitCode != 3 || got.ContainerID != "docker://debug1" {
			t.Errorf("%s: %+v, want the old terminated status", name, got.State)
		}
	}

	prev := &corev1.PodStatus{EphemeralContainerStatuses: []corev1.ContainerStatus{old}}
	check("last generated", Generate(Input{Pod: p, Runtime: &rt, ContainerID: func(id string) string { return "docker://" + id }, Now: time.Unix(1000, 0), Previous: prev}))

	fromAPI := p.DeepCopy()
	fromAPI.Status.EphemeralContainerStatuses = []corev1.ContainerStatus{old}
	check("API copy", gen(fromAPI, rt, nil, false))

	// A fresh instance in the runtime cannot revive it either.
	rt.Containers = append(rt.Containers, cs("debug", podruntime.StateRunning, 0, 0))
	check("running again", gen(fromAPI, rt, nil, false))
}
