package podutil

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/podsource"
)

func TestIsSidecar(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy *corev1.ContainerRestartPolicy
		want   bool
	}{
		{"no policy", nil, false},
		{"Always", ptr.To(corev1.ContainerRestartPolicyAlways), true},
		{"OnFailure", ptr.To(corev1.ContainerRestartPolicyOnFailure), false},
		{"Never", ptr.To(corev1.ContainerRestartPolicyNever), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsSidecar(&corev1.Container{Name: "c", RestartPolicy: tc.policy}); got != tc.want {
				t.Errorf("IsSidecar = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestIsCritical(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ann            map[string]string
		priority       *int32
		class          string
		critical, node bool
	}{
		{"plain", nil, nil, "", false, false},
		{"user priority", nil, ptr.To(HighestUserDefinablePriority), "", false, false},
		{"just below critical", nil, ptr.To(SystemCriticalPriority - 1), SystemNodeCritical, false, false},
		{"system critical priority", nil, ptr.To(SystemCriticalPriority), "", true, false},
		{"node critical class", nil, ptr.To(SystemCriticalPriority + 1000), SystemNodeCritical, true, true},
		{"cluster critical class", nil, ptr.To(SystemCriticalPriority), SystemClusterCritical, true, false},
		{"static", map[string]string{podsource.SourceAnnotation: podsource.FileSource}, nil, "", true, false},
		{"static node critical", map[string]string{podsource.SourceAnnotation: podsource.FileSource}, nil, SystemNodeCritical, true, true},
		{"api source", map[string]string{podsource.SourceAnnotation: podsource.APISource}, nil, SystemNodeCritical, false, false},
		{"mirror", map[string]string{podsource.MirrorAnnotation: "hash"}, nil, "", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann},
				Spec:       corev1.PodSpec{Priority: tc.priority, PriorityClassName: tc.class},
			}
			if got := IsCritical(pod); got != tc.critical {
				t.Errorf("IsCritical = %v, want %v", got, tc.critical)
			}
			if got := IsNodeCritical(pod); got != tc.node {
				t.Errorf("IsNodeCritical = %v, want %v", got, tc.node)
			}
		})
	}
}

// podOf has a sidecar s (when sidecar), a regular init container i and the
// app containers a and b.
func podOf(sidecar bool, gates ...corev1.PodConditionType) *corev1.Pod {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "i"}},
		Containers:     []corev1.Container{{Name: "a"}, {Name: "b"}},
	}}
	if sidecar {
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "s", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
	}
	for _, g := range gates {
		pod.Spec.ReadinessGates = append(pod.Spec.ReadinessGates, corev1.PodReadinessGate{ConditionType: g})
	}
	return pod
}

func statuses(ready map[string]bool) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, n := range []string{"i", "s", "a", "b"} {
		if r, ok := ready[n]; ok {
			out = append(out, corev1.ContainerStatus{Name: n, Ready: r})
		}
	}
	return out
}

func TestContainersReadyCondition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sidecar bool
		phase   corev1.PodPhase
		init    map[string]bool
		regular map[string]bool
		status  corev1.ConditionStatus
		reason  string
		message string
	}{
		{"all ready", false, corev1.PodRunning, map[string]bool{"i": true}, map[string]bool{"a": true, "b": true},
			corev1.ConditionTrue, "", ""},
		{"regular init not ready does not count", false, corev1.PodRunning, map[string]bool{"i": false}, map[string]bool{"a": true, "b": true},
			corev1.ConditionTrue, "", ""},
		{"no statuses", false, corev1.PodPending, nil, nil,
			corev1.ConditionFalse, ReasonContainersNotReady, "containers with unknown status: [a b]"},
		{"one unready", false, corev1.PodRunning, nil, map[string]bool{"a": true, "b": false},
			corev1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [b]"},
		{"sidecar unready and unknown", true, corev1.PodRunning, map[string]bool{"i": true, "s": false}, map[string]bool{"a": true},
			corev1.ConditionFalse, ReasonContainersNotReady, "containers with unknown status: [b], containers with unready status: [s]"},
		{"sidecar missing", true, corev1.PodRunning, map[string]bool{"i": true}, map[string]bool{"a": true, "b": true},
			corev1.ConditionFalse, ReasonContainersNotReady, "containers with unknown status: [s]"},
		{"sidecar ready", true, corev1.PodRunning, map[string]bool{"i": true, "s": true}, map[string]bool{"a": true, "b": true},
			corev1.ConditionTrue, "", ""},
		{"succeeded", false, corev1.PodSucceeded, nil, map[string]bool{"a": false, "b": false},
			corev1.ConditionFalse, ReasonPodCompleted, ""},
		{"succeeded with unknown", false, corev1.PodSucceeded, nil, map[string]bool{"a": false},
			corev1.ConditionFalse, ReasonContainersNotReady, "containers with unknown status: [b], containers with unready status: [a]"},
		{"failed", false, corev1.PodFailed, nil, nil,
			corev1.ConditionFalse, ReasonPodFailed, ""},
		{"failed while ready", false, corev1.PodFailed, nil, map[string]bool{"a": true, "b": true},
			corev1.ConditionFalse, ReasonPodFailed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &corev1.PodStatus{Phase: tc.phase, InitContainerStatuses: statuses(tc.init), ContainerStatuses: statuses(tc.regular)}
			got := ContainersReadyCondition(podOf(tc.sidecar), st)
			want := corev1.PodCondition{Type: corev1.ContainersReady, Status: tc.status, Reason: tc.reason, Message: tc.message}
			if got != want {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestReadyCondition(t *testing.T) {
	notReady := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: ReasonContainersNotReady, Message: "containers with unready status: [a]"}
	ready := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
	cond := func(t corev1.PodConditionType, s corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: s}
	}
	for _, tc := range []struct {
		name    string
		gates   []corev1.PodConditionType
		cr      corev1.PodCondition
		conds   []corev1.PodCondition
		status  corev1.ConditionStatus
		reason  string
		message string
	}{
		{"containers not ready", []corev1.PodConditionType{"g"}, notReady, nil,
			corev1.ConditionFalse, ReasonContainersNotReady, "containers with unready status: [a]"},
		{"ready without gates", nil, ready, nil, corev1.ConditionTrue, "", ""},
		{"gate missing", []corev1.PodConditionType{"g"}, ready, nil,
			corev1.ConditionFalse, ReasonReadinessGatesNotReady, `corresponding condition of pod readiness gate "g" does not exist.`},
		{"gate false", []corev1.PodConditionType{"g"}, ready, []corev1.PodCondition{cond("g", corev1.ConditionFalse)},
			corev1.ConditionFalse, ReasonReadinessGatesNotReady, `the status of pod readiness gate "g" is not "True", but False`},
		{"last of a type wins", []corev1.PodConditionType{"g"}, ready, []corev1.PodCondition{cond("g", corev1.ConditionFalse), cond("g", corev1.ConditionTrue)},
			corev1.ConditionTrue, "", ""},
		{"two gates", []corev1.PodConditionType{"g", "h"}, ready, []corev1.PodCondition{cond("g", corev1.ConditionUnknown)},
			corev1.ConditionFalse, ReasonReadinessGatesNotReady,
			`the status of pod readiness gate "g" is not "True", but Unknown, corresponding condition of pod readiness gate "h" does not exist.`},
		{"gates true", []corev1.PodConditionType{"g", "h"}, ready, []corev1.PodCondition{cond("h", corev1.ConditionTrue), cond("g", corev1.ConditionTrue)},
			corev1.ConditionTrue, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ReadyCondition(podOf(false, tc.gates...), tc.cr, tc.conds)
			want := corev1.PodCondition{Type: corev1.PodReady, Status: tc.status, Reason: tc.reason, Message: tc.message}
			if got != want {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestFindContainer(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "app"}},
		InitContainers: []corev1.Container{{Name: "init"}},
		EphemeralContainers: []corev1.EphemeralContainer{
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", TTY: true}},
		},
	}}
	if c := FindContainer(pod, "app", true); c != &pod.Spec.Containers[0] {
		t.Errorf("app: got %p, want a pointer into the pod's containers", c)
	}
	if c := FindContainer(pod, "init", false); c != &pod.Spec.InitContainers[0] {
		t.Errorf("init: got %p, want a pointer into the pod's init containers", c)
	}
	c := FindContainer(pod, "debug", true)
	if c == nil || !c.TTY {
		t.Fatalf("debug with ephemeral: got %+v", c)
	}
	c.Image = "busybox"
	if pod.Spec.EphemeralContainers[0].Image != "busybox" {
		t.Error("the ephemeral container is a copy, want a pointer into the pod")
	}
	if c := FindContainer(pod, "debug", false); c != nil {
		t.Errorf("debug without ephemeral: got %+v, want nil", c)
	}
	if c := FindContainer(pod, "none", true); c != nil {
		t.Errorf("none: got %+v, want nil", c)
	}
	if c := FindContainer(nil, "app", true); c != nil {
		t.Errorf("nil pod: got %+v, want nil", c)
	}
}
