package podruntime

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/podutil"
)

func testPod(policy corev1.RestartPolicy, inits int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: corev1.PodSpec{
			RestartPolicy: policy,
			Containers:    []corev1.Container{{Name: "a", Image: "img"}, {Name: "b", Image: "img"}},
		},
	}
	for i := 0; i < inits; i++ {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "init" + string(rune('0'+i)), Image: "img"})
	}
	return p
}

func running(p *corev1.Pod, name string) ContainerStatus {
	c := podutil.FindContainer(p, name, true)
	return ContainerStatus{ID: name + "-id", Name: name, State: StateRunning, Hash: HashContainer(c)}
}

func exited(p *corev1.Pod, name string, code int32) ContainerStatus {
	c := podutil.FindContainer(p, name, true)
	return ContainerStatus{ID: name + "-id", Name: name, State: StateExited, ExitCode: code, Hash: HashContainer(c), FinishedAt: time.Now()}
}

var readySandbox = []SandboxStatus{{ID: "sb", Ready: true}}

func TestComputePodActions(t *testing.T) {
	always := testPod(corev1.RestartPolicyAlways, 0)
	never := testPod(corev1.RestartPolicyNever, 0)
	onFailure := testPod(corev1.RestartPolicyOnFailure, 0)
	withInit := testPod(corev1.RestartPolicyAlways, 2)
	initNever := testPod(corev1.RestartPolicyNever, 1)
	changed := always.DeepCopy()
	changed.Spec.Containers[1].Image = "other"

	tests := []struct {
		name string
		pod  *corev1.Pod
		st   PodStatus
		want Actions
	}{
		{"new pod", always, PodStatus{}, Actions{CreateSandbox: true, NextInit: -1, Start: []int{0, 1}, Kill: map[string]string{}}},
		{"new pod with init", withInit, PodStatus{}, Actions{CreateSandbox: true, NextInit: 0, Kill: map[string]string{}}},
		{"all running", always, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(always, "a"), running(always, "b")}},
			Actions{SandboxID: "sb", NextInit: -1, Kill: map[string]string{}}},
		{"one missing", always, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(always, "a")}},
			Actions{SandboxID: "sb", NextInit: -1, Start: []int{1}, Kill: map[string]string{}}},
		{"always restarts success", always, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(always, "a"), exited(always, "b", 0)}},
			Actions{SandboxID: "sb", NextInit: -1, Start: []int{1}, Kill: map[string]string{}}},
		{"never leaves failure", never, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(never, "a"), exited(never, "b", 1)}},
			Actions{SandboxID: "sb", NextInit: -1, Kill: map[string]string{}}},
		{"onfailure restarts failure", onFailure, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{exited(onFailure, "a", 0), exited(onFailure, "b", 2)}},
			Actions{SandboxID: "sb", NextInit: -1, Start: []int{1}, Kill: map[string]string{}}},
		{"spec changed restarts", changed, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(always, "a"), running(always, "b")}},
			Actions{SandboxID: "sb", NextInit: -1, Start: []int{1}, Kill: map[string]string{"b-id": "Container b definition changed, will be restarted"}}},
		{"sandbox died", always, PodStatus{Sandboxes: []SandboxStatus{{ID: "sb", Attempt: 0}}, Containers: []ContainerStatus{running(always, "a")}},
			Actions{KillPod: true, CreateSandbox: true, SandboxAttempt: 1, NextInit: -1, Start: []int{0, 1}, Kill: map[string]string{}}},
		{"finished pod gets no new sandbox", never, PodStatus{Sandboxes: []SandboxStatus{{ID: "sb"}}, Containers: []ContainerStatus{exited(never, "a", 0), exited(never, "b", 1)}},
			Actions{SandboxAttempt: 1, NextInit: -1, Kill: map[string]string{}}},
		{"first init running waits", withInit, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(withInit, "init0")}},
			Actions{SandboxID: "sb", NextInit: -1, Kill: map[string]string{}}},
		{"next init after success", withInit, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{exited(withInit, "init0", 0)}},
			Actions{SandboxID: "sb", NextInit: 1, Kill: map[string]string{}}},
		{"failed init retried", withInit, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{exited(withInit, "init0", 1)}},
			Actions{SandboxID: "sb", NextInit: 0, Kill: map[string]string{}}},
		{"failed init with Never fails pod", initNever, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{exited(initNever, "init0", 1)}},
			Actions{SandboxID: "sb", NextInit: -1, InitFailed: true, Kill: map[string]string{}}},
		{"inits done start regular", withInit, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{exited(withInit, "init0", 0), exited(withInit, "init1", 0)}},
			Actions{SandboxID: "sb", NextInit: -1, Start: []int{0, 1}, Kill: map[string]string{}}},
	}
	m := NewManager(nil, nil, Options{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := m.ComputePodActions(tc.pod, &tc.st)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestGracePeriod(t *testing.T) {
	ten, one := int64(10), int64(1)
	p := testPod(corev1.RestartPolicyAlways, 0)
	if g := gracePeriod(p, nil); g != 30 {
		t.Fatalf("default grace = %d, want 30", g)
	}
	p.Spec.TerminationGracePeriodSeconds = &ten
	if g := gracePeriod(p, nil); g != 10 {
		t.Fatalf("spec grace = %d, want 10", g)
	}
	p.DeletionGracePeriodSeconds = &one
	if g := gracePeriod(p, nil); g != minGracePeriod {
		t.Fatalf("deletion grace 1 = %d, want the %d s minimum", g, minGracePeriod)
	}
}

func TestExpand(t *testing.T) {
	vals := map[string]string{"A": "x", "B": "y"}
	for in, want := range map[string]string{"$(A)-$(B)": "x-y", "$$(A)": "$(A)", "$(C)": "$(C)", "plain": "plain", "$(A": "$(A"} {
		if got := expand(in, vals); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

type failedLiveness map[string]bool

func (f failedLiveness) FailedProbe(_ *corev1.Container, id string) (string, *int64, bool) {
	g := int64(5)
	return "liveness", &g, f[id]
}

func (f failedLiveness) Started(*corev1.Container, string) bool { return true }

func TestLivenessFailureRestarts(t *testing.T) {
	five := int64(5)
	for _, tc := range []struct {
		policy corev1.RestartPolicy
		want   Actions
	}{
		{corev1.RestartPolicyAlways, Actions{SandboxID: "sb", NextInit: -1, Start: []int{1},
			Kill: map[string]string{"b-id": "Container b failed liveness probe, will be restarted"}, KillGrace: map[string]*int64{"b-id": &five}}},
		{corev1.RestartPolicyOnFailure, Actions{SandboxID: "sb", NextInit: -1, Start: []int{1},
			Kill: map[string]string{"b-id": "Container b failed liveness probe, will be restarted"}, KillGrace: map[string]*int64{"b-id": &five}}},
		{corev1.RestartPolicyNever, Actions{SandboxID: "sb", NextInit: -1,
			Kill: map[string]string{"b-id": "Container b failed liveness probe"}, KillGrace: map[string]*int64{"b-id": &five}}},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			p := testPod(tc.policy, 0)
			m := NewManager(nil, nil, Options{})
			m.SetHealth(failedLiveness{"b-id": true})
			st := PodStatus{Sandboxes: []SandboxStatus{{ID: "sb", Ready: true}}, Containers: []ContainerStatus{running(p, "a"), running(p, "b")}}
			if got := m.ComputePodActions(p, &st); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
