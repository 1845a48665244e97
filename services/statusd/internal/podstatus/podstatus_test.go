package podstatus

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/podutil"
)

func testPod(policy corev1.RestartPolicy, containers ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	p.Spec.RestartPolicy = policy
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

func running(name string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
}

func terminated(name string, code int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
}

func TestCheckTransition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		policy  corev1.RestartPolicy
		old     corev1.ContainerStatus
		next    corev1.ContainerStatus
		illegal bool
	}{
		{"never: terminated to running", corev1.RestartPolicyNever, terminated("a", 0), running("a"), true},
		{"never: failed to running", corev1.RestartPolicyNever, terminated("a", 1), running("a"), true},
		{"onfailure: succeeded to running", corev1.RestartPolicyOnFailure, terminated("a", 0), running("a"), true},
		{"onfailure: failed to running", corev1.RestartPolicyOnFailure, terminated("a", 2), running("a"), false},
		{"always: succeeded to running", corev1.RestartPolicyAlways, terminated("a", 0), running("a"), false},
		{"never: running to terminated", corev1.RestartPolicyNever, running("a"), terminated("a", 0), false},
		{"never: stays terminated", corev1.RestartPolicyNever, terminated("a", 0), terminated("a", 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod(tc.policy, "a")
			old := &corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{tc.old}}
			next := &corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{tc.next}}
			err := CheckTransition(old, next, &pod.Spec)
			if got := errors.Is(err, ErrIllegalTransition); got != tc.illegal {
				t.Fatalf("illegal=%v, want %v (err %v)", got, tc.illegal, err)
			}
		})
	}
}

func TestCheckTransitionSidecarMayRestart(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := testPod(corev1.RestartPolicyNever, "a")
	pod.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: &always}, {Name: "init"}}
	old := &corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{terminated("side", 0), terminated("init", 0)}}
	ok := &corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{running("side"), terminated("init", 0)}}
	if err := CheckTransition(old, ok, &pod.Spec); err != nil {
		t.Fatalf("sidecar restart refused: %v", err)
	}
	bad := &corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{running("side"), running("init")}}
	if err := CheckTransition(old, bad, &pod.Spec); !errors.Is(err, ErrIllegalTransition) {
		t.Fatalf("init restart accepted: %v", err)
	}
}

func TestPrepareKeepsTimesAndNormalises(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "b", "a")
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	first, err := Prepare(pod, nil, &corev1.PodStatus{
		Phase:      corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "b", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(t0.Add(123 * time.Millisecond))}}},
			{Name: "a"},
		},
	}, t0.Add(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if first.StartTime == nil || !first.StartTime.Time.Equal(t0) {
		t.Fatalf("StartTime = %v, want %v (set and truncated)", first.StartTime, t0)
	}
	if first.ContainerStatuses[0].Name != "a" {
		t.Fatalf("container statuses not sorted: %v", first.ContainerStatuses)
	}
	if got := first.ContainerStatuses[1].State.Running.StartedAt.Time; !got.Equal(t0) {
		t.Fatalf("StartedAt not truncated: %v", got)
	}
	if got := first.Conditions[0].LastTransitionTime.Time; !got.Equal(t0) {
		t.Fatalf("LastTransitionTime = %v, want %v", got, t0)
	}

	// Same condition status later: time kept. StartTime in the input is ignored.
	later := t0.Add(time.Hour)
	in := first.DeepCopy()
	in.StartTime = &metav1.Time{Time: later}
	in.Conditions[0].LastTransitionTime = metav1.NewTime(later)
	second, err := Prepare(pod, &first, in, later)
	if err != nil {
		t.Fatal(err)
	}
	if !second.StartTime.Time.Equal(t0) || !second.Conditions[0].LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("times not kept: start %v transition %v", second.StartTime, second.Conditions[0].LastTransitionTime)
	}
	// Status flips: new transition time.
	in = second.DeepCopy()
	in.Conditions[0].Status = corev1.ConditionTrue
	third, err := Prepare(pod, &second, in, later)
	if err != nil {
		t.Fatal(err)
	}
	if !third.Conditions[0].LastTransitionTime.Time.Equal(later) {
		t.Fatalf("transition time %v, want %v", third.Conditions[0].LastTransitionTime, later)
	}
}

func TestNormalizeTruncatesMessages(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "a", "b")
	st := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "a", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: strings.Repeat("x", 10000)}}}}}
	Normalize(pod, &st)
	if got := len(st.ContainerStatuses[0].State.Terminated.Message); got != MaxTerminationMessageBytes/2 {
		t.Fatalf("message length %d, want %d", got, MaxTerminationMessageBytes/2)
	}
}

func TestTerminate(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "a", "b")
	cur := &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{running("a"), terminated("b", 3)}}
	st := Terminate(pod, cur)
	if st.Phase != corev1.PodFailed {
		t.Fatalf("phase %s, want Failed", st.Phase)
	}
	a := st.ContainerStatuses[0].State.Terminated
	if a == nil || a.ExitCode != 137 || a.Reason != ReasonStatusUnknown {
		t.Fatalf("running container not marked unknown: %+v", st.ContainerStatuses[0].State)
	}
	if st.ContainerStatuses[1].State.Terminated.ExitCode != 3 {
		t.Fatal("terminated container changed")
	}
	if cur.ContainerStatuses[0].State.Running == nil {
		t.Fatal("input modified")
	}

	done := &corev1.PodStatus{Phase: corev1.PodSucceeded}
	if got := Terminate(pod, done).Phase; got != corev1.PodSucceeded {
		t.Fatalf("finished pod phase changed to %s", got)
	}
	static := testPod(corev1.RestartPolicyAlways, "a")
	static.Annotations = map[string]string{podsource.SourceAnnotation: podsource.FileSource}
	if got := Terminate(static, &corev1.PodStatus{Phase: corev1.PodRunning}).Phase; got != corev1.PodRunning {
		t.Fatalf("static pod phase changed to %s", got)
	}
}

func TestMergeKeepsForeignConditions(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "a")
	api := corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
		{Type: "example.com/Gate", Status: corev1.ConditionTrue},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse},
	}}
	ours := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	m := Merge(pod, api, ours, true)
	if len(m.Conditions) != 2 || m.Conditions[0].Type != "example.com/Gate" || m.Conditions[1].Status != corev1.ConditionTrue {
		t.Fatalf("merged conditions %+v", m.Conditions)
	}
	if m.Phase != corev1.PodRunning {
		t.Fatalf("phase %s", m.Phase)
	}
}

func TestMergeTerminal(t *testing.T) {
	pod := testPod(corev1.RestartPolicyNever, "a")
	api := corev1.PodStatus{Phase: corev1.PodRunning}
	ours := corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if got := Merge(pod, api, ours, true).Phase; got != corev1.PodRunning {
		t.Fatalf("terminal phase not held back while containers may run: %s", got)
	}
	m := Merge(pod, api, ours, false)
	if m.Phase != corev1.PodFailed || m.Conditions[0].Status != corev1.ConditionFalse {
		t.Fatalf("terminal merge %s %+v", m.Phase, m.Conditions)
	}
}

func TestEqualByKubeletAndReconcile(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "a")
	ours := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
	Normalize(pod, &ours)
	api := pod.DeepCopy()
	api.Status = *ours.DeepCopy()
	api.Status.Conditions = append(api.Status.Conditions, corev1.PodCondition{Type: "other", Status: corev1.ConditionTrue})
	api.Status.Conditions[0].LastTransitionTime = metav1.NewTime(time.Unix(1, 0))
	if NeedsReconcile(api, &ours) {
		t.Fatal("foreign condition or transition time caused a reconcile")
	}
	gen := api.DeepCopy()
	gen.Status.Conditions[0].ObservedGeneration = 2
	if !NeedsReconcile(gen, &ours) {
		t.Fatal("a kubelet condition's observedGeneration difference not seen")
	}
	api.Status.Phase = corev1.PodPending
	if !NeedsReconcile(api, &ours) {
		t.Fatal("phase difference not seen")
	}
}

func TestReadinessConditions(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "a", "b")
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "gate"}}
	st := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "a", Ready: true}, {Name: "b", Ready: true}}}
	ReadinessConditions(pod, &st)
	if c := condition(&st, corev1.ContainersReady); c.Status != corev1.ConditionTrue {
		t.Fatalf("ContainersReady %+v", c)
	}
	if c := condition(&st, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != podutil.ReasonReadinessGatesNotReady {
		t.Fatalf("PodReady %+v", c)
	}
	st.Conditions = append(st.Conditions, corev1.PodCondition{Type: "gate", Status: corev1.ConditionTrue})
	st.ContainerStatuses[1].Ready = false
	ReadinessConditions(pod, &st)
	if c := condition(&st, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != podutil.ReasonContainersNotReady {
		t.Fatalf("PodReady %+v", c)
	}
}

func TestCanBeDeleted(t *testing.T) {
	pod := testPod(corev1.RestartPolicyNever, "a")
	now := metav1.Now()
	pod.DeletionTimestamp = &now
	pod.Status.Phase = corev1.PodSucceeded
	if CanBeDeleted(pod, false) {
		t.Fatal("deleted before resources reclaimed")
	}
	if !CanBeDeleted(pod, true) {
		t.Fatal("terminal reclaimed pod not deletable")
	}
	pod.Annotations = map[string]string{podsource.MirrorAnnotation: "h"}
	if CanBeDeleted(pod, true) {
		t.Fatal("mirror pod deletable")
	}
}

func TestMergeReadinessGates(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "a")
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}, {ConditionType: "example.com/dns"}}
	ready := func(cr corev1.ConditionStatus) corev1.PodStatus {
		return corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.ContainersReady, Status: cr},
			{Type: corev1.PodReady, Status: cr},
		}}
	}
	gate := func(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: s}
	}
	for _, tc := range []struct {
		name       string
		api        []corev1.PodCondition
		containers corev1.ConditionStatus
		want       corev1.ConditionStatus
		reason     string
		message    string
	}{
		{name: "no gate condition yet", containers: corev1.ConditionTrue, want: corev1.ConditionFalse, reason: podutil.ReasonReadinessGatesNotReady,
			message: `corresponding condition of pod readiness gate "example.com/lb" does not exist., corresponding condition of pod readiness gate "example.com/dns" does not exist.`},
		{name: "one gate false", containers: corev1.ConditionTrue,
			api:  []corev1.PodCondition{gate("example.com/lb", corev1.ConditionTrue), gate("example.com/dns", corev1.ConditionFalse)},
			want: corev1.ConditionFalse, reason: podutil.ReasonReadinessGatesNotReady, message: `the status of pod readiness gate "example.com/dns" is not "True", but False`},
		{name: "all gates true", containers: corev1.ConditionTrue,
			api:  []corev1.PodCondition{gate("example.com/lb", corev1.ConditionTrue), gate("example.com/dns", corev1.ConditionTrue)},
			want: corev1.ConditionTrue},
		{name: "containers not ready wins", containers: corev1.ConditionFalse,
			api:  []corev1.PodCondition{gate("example.com/lb", corev1.ConditionTrue), gate("example.com/dns", corev1.ConditionTrue)},
			want: corev1.ConditionFalse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: tc.api}
			m := Merge(pod, api, ready(tc.containers), true)
			c := condition(&m, corev1.PodReady)
			if c.Status != tc.want || c.Reason != tc.reason || c.Message != tc.message {
				t.Fatalf("Ready = %s %q %q, want %s %q %q", c.Status, c.Reason, c.Message, tc.want, tc.reason, tc.message)
			}
			for _, g := range tc.api {
				if got := condition(&m, g.Type); got == nil || got.Status != g.Status {
					t.Fatalf("gate condition %s lost or changed: %+v", g.Type, got)
				}
			}
			// The API showing what would be sent needs no reconcile; the
			// ungated cached status alone would have asked for one.
			shown := pod.DeepCopy()
			shown.Status = m
			cached := ready(tc.containers)
			if NeedsReconcile(shown, &cached) {
				t.Fatalf("API showing the gated status %+v still needs a reconcile", m.Conditions)
			}
		})
	}
}

func TestGateConditionsChanged(t *testing.T) {
	pod := testPod(corev1.RestartPolicyAlways, "a")
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	with := func(conds ...corev1.PodCondition) *corev1.Pod {
		p := pod.DeepCopy()
		p.Status.Conditions = conds
		return p
	}
	lbTrue := corev1.PodCondition{Type: "example.com/lb", Status: corev1.ConditionTrue}
	lbFalse := corev1.PodCondition{Type: "example.com/lb", Status: corev1.ConditionFalse}
	other := corev1.PodCondition{Type: "other", Status: corev1.ConditionTrue}
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Pod
		want     bool
	}{
		{"appears", with(), with(lbTrue), true},
		{"flips", with(lbTrue), with(lbFalse), true},
		{"same", with(lbTrue), with(lbTrue, other), false},
		{"ungated condition", with(), with(other), false},
	} {
		if got := GateConditionsChanged(tc.old, tc.cur); got != tc.want {
			t.Errorf("%s: GateConditionsChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}
