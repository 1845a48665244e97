package podruntime

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/events"

	"github.com/microlet/microlet/internal/podutil"
)

func withEphemeral(p *corev1.Pod, names ...string) *corev1.Pod {
	p = p.DeepCopy()
	for _, n := range names {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: n, Image: "busybox"}, TargetContainerName: "a"})
	}
	return p
}

func TestComputePodActionsEphemeral(t *testing.T) {
	always := withEphemeral(testPod(corev1.RestartPolicyAlways, 0), "debug", "debug2")
	withInit := withEphemeral(testPod(corev1.RestartPolicyAlways, 1), "debug")
	initNever := withEphemeral(testPod(corev1.RestartPolicyNever, 1), "debug")
	eph := func(p *corev1.Pod, name string, state ContainerState) ContainerStatus {
		c := podutil.FindContainer(p, name, true)
		return ContainerStatus{ID: name + "-id", Name: name, State: state, Hash: HashContainer(c)}
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		st   PodStatus
		want Actions
	}{
		{"new ephemeral containers start", always, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(always, "a"), running(always, "b")}},
			Actions{SandboxID: "sb", NextInit: -1, StartEphemeral: []int{0, 1}, Kill: map[string]string{}}},
		{"running one is left alone", always, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(always, "a"), running(always, "b"), eph(always, "debug", StateRunning)}},
			Actions{SandboxID: "sb", NextInit: -1, StartEphemeral: []int{1}, Kill: map[string]string{}}},
		{"exited ones never restart, whatever the policy", always, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(always, "a"), running(always, "b"),
			eph(always, "debug", StateExited), eph(always, "debug2", StateCreated)}},
			Actions{SandboxID: "sb", NextInit: -1, Kill: map[string]string{}}},
		{"starts while init containers run", withInit, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(withInit, "init0")}},
			Actions{SandboxID: "sb", NextInit: -1, StartEphemeral: []int{0}, Kill: map[string]string{}}},
		{"not in a pod whose init failed for good", initNever, PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{exited(initNever, "init0", 1)}},
			Actions{SandboxID: "sb", NextInit: -1, InitFailed: true, Kill: map[string]string{}}},
		{"not with a new sandbox", always, PodStatus{},
			Actions{CreateSandbox: true, NextInit: -1, Start: []int{0, 1}, Kill: map[string]string{}}},
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

func TestPIDTarget(t *testing.T) {
	p := withEphemeral(testPod(corev1.RestartPolicyAlways, 0), "debug")
	p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "plain"}})
	debug := podutil.FindContainer(p, "debug", true)
	st := &PodStatus{Containers: []ContainerStatus{running(p, "a")}}
	if id, err := pidTarget(p, debug, kindEphemeral, st); err != nil || id != "a-id" {
		t.Fatalf("target of debug = %q, %v; want a-id", id, err)
	}
	if id, err := pidTarget(p, podutil.FindContainer(p, "plain", true), kindEphemeral, st); err != nil || id != "" {
		t.Fatalf("target of an untargeted container = %q, %v", id, err)
	}
	if id, err := pidTarget(p, podutil.FindContainer(p, "a", true), kindRegular, st); err != nil || id != "" {
		t.Fatalf("target of a regular container = %q, %v", id, err)
	}
	if _, err := pidTarget(p, debug, kindEphemeral, &PodStatus{}); err == nil || err.Error() != "unable to find target container a" {
		t.Fatalf("missing target: %v", err)
	}
}

func TestEphemeralLabelAndEvents(t *testing.T) {
	p := withEphemeral(testPod(corev1.RestartPolicyAlways, 0), "debug")
	c := podutil.FindContainer(p, "debug", true)
	if got := containerLabels(p, c, kindEphemeral)[LabelContainerType]; got != "ephemeral" {
		t.Errorf("container type label = %q", got)
	}
	if got := events.ContainerRef(p, c).FieldPath; got != "spec.ephemeralContainers{debug}" {
		t.Errorf("event field path = %q", got)
	}
}
