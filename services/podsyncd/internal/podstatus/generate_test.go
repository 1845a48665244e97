package podstatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

func pod(policy corev1.RestartPolicy) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u"},
		Spec:       corev1.PodSpec{RestartPolicy: policy, Containers: []corev1.Container{{Name: "a"}, {Name: "b"}}},
	}
}

func cs(name string, state podruntime.ContainerState, code int32, attempt int) podruntime.ContainerStatus {
	return podruntime.ContainerStatus{ID: name + "1", Name: name, State: state, ExitCode: code, Attempt: attempt, StartedAt: time.Unix(100, 0), FinishedAt: time.Unix(200, 0)}
}

func gen(p *corev1.Pod, rt podruntime.PodStatus, reasons map[string]podruntime.Reason, terminal bool) corev1.PodStatus {
	return Generate(Input{Pod: p, Runtime: &rt, Reasons: reasons, ContainerID: func(id string) string { return "docker://" + id }, Terminal: terminal, Now: time.Unix(1000, 0)})
}

var sb = []podruntime.SandboxStatus{{ID: "s", Ready: true, IP: "10.0.0.5", IPs: []string{"10.0.0.5"}}}

func TestPhaseAndConditions(t *testing.T) {
	tests := []struct {
		name      string
		pod       *corev1.Pod
		rt        podruntime.PodStatus
		reasons   map[string]podruntime.Reason
		terminal  bool
		wantPhase corev1.PodPhase
		wantReady bool
	}{
		{"nothing yet", pod(corev1.RestartPolicyAlways), podruntime.PodStatus{}, nil, false, corev1.PodPending, false},
		{"all running", pod(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateRunning, 0, 0)}}, nil, false, corev1.PodRunning, true},
		{"one creating", pod(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0)}}, nil, false, corev1.PodPending, false},
		{"all succeeded, Never", pod(corev1.RestartPolicyNever), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateExited, 0, 0), cs("b", podruntime.StateExited, 0, 0)}}, nil, false, corev1.PodSucceeded, false},
		{"one failed, Never", pod(corev1.RestartPolicyNever), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateExited, 0, 0), cs("b", podruntime.StateExited, 3, 0)}}, nil, false, corev1.PodFailed, false},
		{"crashloop stays Running", pod(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateExited, 1, 3)}},
			map[string]podruntime.Reason{"b": {Reason: "CrashLoopBackOff", Message: "back-off 40s"}}, false, corev1.PodRunning, false},
		{"terminated by deletion fails", pod(corev1.RestartPolicyAlways), podruntime.PodStatus{Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateExited, 137, 0), cs("b", podruntime.StateExited, 0, 0)}}, nil, true, corev1.PodFailed, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := gen(tc.pod, tc.rt, tc.reasons, tc.terminal)
			if st.Phase != tc.wantPhase {
				t.Fatalf("phase = %s, want %s (%+v)", st.Phase, tc.wantPhase, st.ContainerStatuses)
			}
			ready := false
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady {
					ready = c.Status == corev1.ConditionTrue
				}
			}
			if ready != tc.wantReady {
				t.Fatalf("Ready = %v, want %v", ready, tc.wantReady)
			}
		})
	}
}

func TestCrashLoopStatus(t *testing.T) {
	st := gen(pod(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateExited, 1, 3)}},
		map[string]podruntime.Reason{"b": {Reason: "CrashLoopBackOff", Message: "back-off 40s restarting failed container=b"}}, false)
	b := st.ContainerStatuses[1]
	if b.State.Waiting == nil || b.State.Waiting.Reason != "CrashLoopBackOff" {
		t.Fatalf("state = %+v, want Waiting CrashLoopBackOff", b.State)
	}
	if b.LastTerminationState.Terminated == nil || b.LastTerminationState.Terminated.ExitCode != 1 || b.LastTerminationState.Terminated.Reason != "Error" {
		t.Fatalf("last state = %+v, want Terminated exit 1 Error", b.LastTerminationState)
	}
	if b.RestartCount != 3 || b.ContainerID != "docker://b1" {
		t.Fatalf("restarts %d id %s", b.RestartCount, b.ContainerID)
	}
	if st.PodIP != "10.0.0.5" || st.QOSClass != corev1.PodQOSBestEffort {
		t.Fatalf("podIP %q qos %q", st.PodIP, st.QOSClass)
	}
}

type probes struct{ started, ready map[string]bool }

func (p probes) Started(_ *corev1.Container, id string) bool { return p.started[id] }
func (p probes) Ready(_ *corev1.Container, id string) bool   { return p.ready[id] }

func TestProbesDriveReadiness(t *testing.T) {
	rt := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateRunning, 0, 0)}}
	for _, tc := range []struct {
		name        string
		pr          probes
		wantReady   bool
		wantStarted bool
	}{
		{"b not ready", probes{map[string]bool{"a1": true, "b1": true}, map[string]bool{"a1": true}}, false, true},
		{"b not started", probes{map[string]bool{"a1": true}, map[string]bool{"a1": true}}, false, false},
		{"both ready", probes{map[string]bool{"a1": true, "b1": true}, map[string]bool{"a1": true, "b1": true}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Generate(Input{Pod: pod(corev1.RestartPolicyAlways), Runtime: &rt, ContainerID: func(id string) string { return id }, Now: time.Unix(1000, 0), Probes: tc.pr})
			if st.Phase != corev1.PodRunning {
				t.Fatalf("phase %s, want Running", st.Phase)
			}
			b := st.ContainerStatuses[1]
			if b.Ready != tc.wantReady || *b.Started != tc.wantStarted {
				t.Fatalf("container b ready=%v started=%v, want %v %v", b.Ready, *b.Started, tc.wantReady, tc.wantStarted)
			}
			for _, c := range st.Conditions {
				if c.Type == corev1.PodReady && (c.Status == corev1.ConditionTrue) != tc.wantReady {
					t.Fatalf("Ready condition %s, want ready=%v", c.Status, tc.wantReady)
				}
			}
		})
	}
}

// TestInitContainerStatuses: the kubelet's default waiting reason is
// PodInitializing for every container of a pod with init containers (the
// init containers not started yet too), and a finished init container
// reports Ready while a finished sidecar does not.
func TestInitContainerStatuses(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := pod(corev1.RestartPolicyNever)
	p.Spec.InitContainers = []corev1.Container{{Name: "init1"}, {Name: "init2"}, {Name: "side", RestartPolicy: &always}}
	st := gen(p, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("init1", podruntime.StateExited, 0, 0)}}, nil, false)
	if got := st.InitContainerStatuses[0]; got.State.Terminated == nil || !got.Ready {
		t.Errorf("finished init1: %+v, want terminated and ready", got)
	}
	for _, c := range append(st.InitContainerStatuses[1:], st.ContainerStatuses...) {
		if c.State.Waiting == nil || c.State.Waiting.Reason != "PodInitializing" {
			t.Errorf("%s: state %+v, want waiting PodInitializing", c.Name, c.State)
		}
	}
	failed := gen(p, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("init1", podruntime.StateExited, 2, 0)}}, nil, false)
	if failed.InitContainerStatuses[0].Ready {
		t.Error("an init container that failed is ready")
	}
	p2 := pod(corev1.RestartPolicyAlways)
	st2 := gen(p2, podruntime.PodStatus{Sandboxes: sb}, nil, false)
	if w := st2.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
		t.Errorf("no init containers: %+v, want ContainerCreating", st2.ContainerStatuses[0].State)
	}
}

// TestCompletedInitContainersUnderEveryPolicy: an init container that exited
// 0 stays terminated and Ready under Always and OnFailure too (it is not run
// again), while a failed one under Always waits to be restarted.
func TestCompletedInitContainersUnderEveryPolicy(t *testing.T) {
	for _, pol := range []corev1.RestartPolicy{corev1.RestartPolicyAlways, corev1.RestartPolicyOnFailure, corev1.RestartPolicyNever} {
		p := pod(pol)
		p.Spec.InitContainers = []corev1.Container{{Name: "init1"}, {Name: "init2"}}
		st := gen(p, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{
			cs("init1", podruntime.StateExited, 0, 0), cs("init2", podruntime.StateExited, 0, 0),
			cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateRunning, 0, 0)}}, nil, false)
		for _, c := range st.InitContainerStatuses {
			if c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 || !c.Ready {
				t.Errorf("%s: %s ready=%v state=%+v, want terminated 0 and ready", pol, c.Name, c.Ready, c.State)
			}
		}
		if st.Phase != corev1.PodRunning {
			t.Errorf("%s: phase %s", pol, st.Phase)
		}
	}
	p := pod(corev1.RestartPolicyAlways)
	p.Spec.InitContainers = []corev1.Container{{Name: "init1"}}
	st := gen(p, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("init1", podruntime.StateExited, 1, 0)}}, nil, false)
	if c := st.InitContainerStatuses[0]; c.State.Waiting == nil || c.LastTerminationState.Terminated == nil || c.Ready {
		t.Errorf("failed init container under Always: %+v", c)
	}
}

// TestInitializedCondition: the kubelet's reasons and messages.
func TestInitializedCondition(t *testing.T) {
	cond := func(st corev1.PodStatus) corev1.PodCondition {
		for _, c := range st.Conditions {
			if c.Type == corev1.PodInitialized {
				return c
			}
		}
		t.Fatal("no Initialized condition")
		return corev1.PodCondition{}
	}
	withInit := func(pol corev1.RestartPolicy) *corev1.Pod {
		p := pod(pol)
		p.Spec.InitContainers = []corev1.Container{{Name: "init1"}, {Name: "init2"}}
		return p
	}
	// Nothing run yet.
	c := cond(gen(withInit(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: sb}, nil, false))
	if c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init1 init2]" {
		t.Errorf("nothing run: %+v", c)
	}
	// init1 running again after failing (restartPolicy Always, the
	// conformance spec's moment between a restart and the next exit): a
	// running regular init container is not ready and not complete.
	st0 := gen(withInit(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{
		cs("init1", podruntime.StateRunning, 0, 3)}}, nil, false)
	if ic := st0.InitContainerStatuses[0]; ic.State.Running == nil || ic.Ready || ic.Started == nil || !*ic.Started {
		t.Errorf("running init1: ready=%v started=%v state=%+v, want running, started, not ready", ic.Ready, ic.Started, ic.State)
	}
	if c := cond(st0); c.Status != corev1.ConditionFalse || c.Message != "containers with incomplete status: [init1 init2]" {
		t.Errorf("init1 running: %+v", c)
	}
	// init2 failed under Never: the pod fails, the condition still names it.
	st := gen(withInit(corev1.RestartPolicyNever), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{
		cs("init1", podruntime.StateExited, 0, 0), cs("init2", podruntime.StateExited, 1, 0)}}, nil, false)
	c = cond(st)
	if st.Phase != corev1.PodFailed || c.Status != corev1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init2]" {
		t.Errorf("init failed under Never: phase %s, %+v", st.Phase, c)
	}
	// All done and the app ran to completion: True, PodCompleted.
	st = gen(withInit(corev1.RestartPolicyNever), podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{
		cs("init1", podruntime.StateExited, 0, 0), cs("init2", podruntime.StateExited, 0, 0),
		cs("a", podruntime.StateExited, 0, 0), cs("b", podruntime.StateExited, 0, 0)}}, nil, false)
	if c = cond(st); st.Phase != corev1.PodSucceeded || c.Status != corev1.ConditionTrue || c.Reason != "PodCompleted" {
		t.Errorf("succeeded: phase %s, %+v", st.Phase, c)
	}
	// No init containers: True without a reason.
	if c = cond(gen(pod(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: sb}, nil, false)); c.Status != corev1.ConditionTrue || c.Reason != "" {
		t.Errorf("no init containers: %+v", c)
	}
}

// A sidecar (restartable init container) whose readiness probe has not
// passed keeps the pod from being ready, with the kubelet's message, as a
// regular container does (the conformance suite's "restartable init
// container readiness probe, with initial delay").
func TestSidecarReadinessGatesPodReady(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	p := pod(corev1.RestartPolicyAlways)
	p.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: &always}}
	rt := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{
		cs("side", podruntime.StateRunning, 0, 0), cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateRunning, 0, 0)}}
	for _, tc := range []struct {
		name    string
		ready   map[string]bool
		want    corev1.ConditionStatus
		message string
	}{
		{"sidecar not ready", map[string]bool{"a1": true, "b1": true}, corev1.ConditionFalse, "containers with unready status: [side]"},
		{"sidecar and b not ready", map[string]bool{"a1": true}, corev1.ConditionFalse, "containers with unready status: [side b]"},
		{"all ready", map[string]bool{"side1": true, "a1": true, "b1": true}, corev1.ConditionTrue, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := map[string]bool{"side1": true, "a1": true, "b1": true}
			st := Generate(Input{Pod: p, Runtime: &rt, ContainerID: func(id string) string { return id }, Now: time.Unix(1000, 0), Probes: probes{started, tc.ready}})
			for _, c := range st.Conditions {
				if c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
					continue
				}
				if c.Status != tc.want || c.Message != tc.message {
					t.Errorf("%s = %s %q, want %s %q", c.Type, c.Status, c.Message, tc.want, tc.message)
				}
			}
		})
	}
}

// A container that was created but failed to start waits with the start's
// error (RunContainerError), not ContainerCreating.
func TestCreatedContainerShowsStartError(t *testing.T) {
	rt := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateCreated, 0, 0), cs("b", podruntime.StateCreated, 0, 0)}}
	st := gen(pod(corev1.RestartPolicyAlways), rt, map[string]podruntime.Reason{"a": {Reason: "RunContainerError", Message: "exec: /bin/bash: not found"}}, false)
	if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "RunContainerError" || w.Message != "exec: /bin/bash: not found" {
		t.Fatalf("a: %+v", st.ContainerStatuses[0].State)
	}
	if w := st.ContainerStatuses[1].State.Waiting; w == nil || w.Reason != "ContainerCreating" {
		t.Fatalf("b: %+v", st.ContainerStatuses[1].State)
	}
}
