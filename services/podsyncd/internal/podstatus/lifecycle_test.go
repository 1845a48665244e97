package podstatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

func TestObservedGeneration(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways)
	p.Generation = 7
	rt := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0)}}
	st := gen(p, rt, nil, false)
	if st.ObservedGeneration != 7 {
		t.Errorf("status observedGeneration = %d, want 7", st.ObservedGeneration)
	}
	if len(st.Conditions) == 0 {
		t.Fatal("no conditions")
	}
	for _, c := range st.Conditions {
		if c.ObservedGeneration != 7 {
			t.Errorf("condition %s observedGeneration = %d, want 7", c.Type, c.ObservedGeneration)
		}
	}
}

func TestStartTimeSurvivesRestart(t *testing.T) {
	p := pod(corev1.RestartPolicyAlways)
	started := metav1.NewTime(time.Unix(500, 0))
	p.Status.StartTime = &started
	rt := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0)}}
	// No previous status (podsyncd restarted): the API's start time stays.
	if st := gen(p, rt, nil, false); st.StartTime == nil || !st.StartTime.Equal(&started) {
		t.Fatalf("startTime = %v, want %v", st.StartTime, started)
	}
}

func TestContainerStatusResources(t *testing.T) {
	q := resource.MustParse
	p := pod(corev1.RestartPolicyAlways)
	p.Spec.InitContainers = []corev1.Container{{Name: "init"}}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("32Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("64Mi")},
	}
	reported := &podruntime.ContainerResources{CPURequest: ptrQ("100m"), CPULimit: ptrQ("300m"), MemoryLimit: ptrQ("128Mi")}
	running := cs("a", podruntime.StateRunning, 0, 0)
	running.Resources = reported
	exited := cs("a", podruntime.StateExited, 1, 0)
	exited.Resources = reported
	initDone := cs("init", podruntime.StateExited, 0, 0)
	initDone.Init = true

	t.Run("running: the runtime's values, memory request from the spec", func(t *testing.T) {
		st := gen(p, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{initDone, running, cs("b", podruntime.StateRunning, 0, 0)}}, nil, false)
		a := st.ContainerStatuses[0]
		want := corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: q("100m"), corev1.ResourceMemory: q("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: q("300m"), corev1.ResourceMemory: q("128Mi")},
		}
		if a.Resources == nil || !equality.Semantic.DeepEqual(*a.Resources, want) {
			t.Errorf("resources = %+v, want %+v", a.Resources, want)
		}
		if !equality.Semantic.DeepEqual(a.AllocatedResources, p.Spec.Containers[0].Resources.Requests) {
			t.Errorf("allocatedResources = %v, want the requests", a.AllocatedResources)
		}
		// A BestEffort container and a finished init container report
		// empty resources, never none (e2e helpers dereference them).
		if b := st.ContainerStatuses[1]; b.Resources == nil || b.AllocatedResources != nil {
			t.Errorf("best-effort container: resources %v allocated %v, want empty and none", b.Resources, b.AllocatedResources)
		}
		if i := st.InitContainerStatuses[0]; i.Resources == nil {
			t.Errorf("init container: resources nil")
		}
	})
	t.Run("not running: the spec's", func(t *testing.T) {
		st := gen(p, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{initDone, exited}}, nil, false)
		a := st.ContainerStatuses[0]
		if a.Resources == nil || !equality.Semantic.DeepEqual(*a.Resources, p.Spec.Containers[0].Resources) {
			t.Errorf("resources = %+v, want the spec's", a.Resources)
		}
	})
	t.Run("runtime silent: previous values of the same instance kept", func(t *testing.T) {
		silent := cs("a", podruntime.StateRunning, 0, 0)
		prev := gen(p, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{initDone, running}}, nil, false)
		st := Generate(Input{Pod: p, Runtime: &podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{initDone, silent}},
			ContainerID: func(id string) string { return "docker://" + id }, Now: time.Unix(1000, 0), Previous: &prev})
		if got := st.ContainerStatuses[0].Resources.Limits[corev1.ResourceCPU]; got.Cmp(q("300m")) != 0 {
			t.Errorf("cpu limit = %s, want the previously reported 300m", got.String())
		}
	})
	t.Run("tiny CPU limit both ways: the spec's stays", func(t *testing.T) {
		tiny := p.DeepCopy()
		tiny.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = q("5m")
		r := cs("a", podruntime.StateRunning, 0, 0)
		r.Resources = &podruntime.ContainerResources{CPULimit: ptrQ("10m")}
		st := gen(tiny, podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{initDone, r}}, nil, false)
		if got := st.ContainerStatuses[0].Resources.Limits[corev1.ResourceCPU]; got.Cmp(q("5m")) != 0 {
			t.Errorf("cpu limit = %s, want the spec's 5m", got.String())
		}
	})
	t.Run("resized: the actuated memory request, resize conditions until terminal", func(t *testing.T) {
		r := cs("a", podruntime.StateRunning, 0, 0)
		r.Resources = &podruntime.ContainerResources{CPURequest: ptrQ("100m"), CPULimit: ptrQ("200m"), MemoryLimit: ptrQ("64Mi"), MemoryRequest: ptrQ("16Mi")}
		inProgress := []corev1.PodCondition{{Type: corev1.PodResizeInProgress, Status: corev1.ConditionTrue, ObservedGeneration: 3}}
		in := Input{Pod: p, Runtime: &podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{initDone, r}},
			ContainerID: func(id string) string { return "docker://" + id }, Now: time.Unix(1000, 0), ResizeConditions: inProgress}
		st := Generate(in)
		if got := st.ContainerStatuses[0].Resources.Requests[corev1.ResourceMemory]; got.Cmp(q("16Mi")) != 0 {
			t.Errorf("memory request = %s, want the actuated 16Mi", got.String())
		}
		if c := condition(st.Conditions, corev1.PodResizeInProgress); c == nil || c.ObservedGeneration != 3 {
			t.Errorf("conditions %+v, want PodResizeInProgress kept", st.Conditions)
		}
		in.Terminal = true
		in.Runtime = &podruntime.PodStatus{Containers: []podruntime.ContainerStatus{initDone, exited}}
		if st := Generate(in); condition(st.Conditions, corev1.PodResizeInProgress) != nil {
			t.Errorf("terminal pod (%s) keeps %+v", st.Phase, st.Conditions)
		}
	})
	t.Run("never created: no resources yet", func(t *testing.T) {
		st := gen(p, podruntime.PodStatus{}, nil, false)
		if r := st.ContainerStatuses[0].Resources; r != nil {
			t.Errorf("resources = %+v for a container that does not exist", r)
		}
	})
}

func ptrQ(s string) *resource.Quantity {
	v := resource.MustParse(s)
	return &v
}

func TestActiveDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	started := metav1.NewTime(now.Add(-10 * time.Second))
	withDeadline := func(secs int64) *corev1.Pod {
		p := pod(corev1.RestartPolicyAlways)
		p.Spec.ActiveDeadlineSeconds = &secs
		return p
	}
	running := podruntime.PodStatus{Sandboxes: sb, Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateRunning, 0, 0), cs("b", podruntime.StateRunning, 0, 0)}}
	exited := podruntime.PodStatus{Containers: []podruntime.ContainerStatus{cs("a", podruntime.StateExited, 0, 0), cs("b", podruntime.StateExited, 0, 0)}}
	tests := []struct {
		name       string
		pod        *corev1.Pod
		rt         podruntime.PodStatus
		prev       *corev1.PodStatus
		terminal   bool
		wantPhase  corev1.PodPhase
		wantReason string
	}{
		{"no deadline", pod(corev1.RestartPolicyAlways), running, &corev1.PodStatus{StartTime: &started}, false, corev1.PodRunning, ""},
		{"within the deadline", withDeadline(11), running, &corev1.PodStatus{StartTime: &started}, false, corev1.PodRunning, ""},
		{"deadline reached", withDeadline(10), running, &corev1.PodStatus{StartTime: &started}, false, corev1.PodFailed, ReasonDeadlineExceeded},
		{"lowered below the time run", withDeadline(5), running, &corev1.PodStatus{StartTime: &started}, false, corev1.PodFailed, ReasonDeadlineExceeded},
		{"killed after the deadline stays DeadlineExceeded", withDeadline(5), exited,
			&corev1.PodStatus{StartTime: &started, Phase: corev1.PodFailed, Reason: ReasonDeadlineExceeded}, true, corev1.PodFailed, ReasonDeadlineExceeded},
		{"finished before it: Succeeded stays", withDeadline(5), exited,
			&corev1.PodStatus{StartTime: &started, Phase: corev1.PodSucceeded}, true, corev1.PodSucceeded, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := Generate(Input{Pod: tc.pod, Runtime: &tc.rt, ContainerID: func(id string) string { return id },
				Terminal: tc.terminal, Now: now, Previous: tc.prev})
			if st.Phase != tc.wantPhase || st.Reason != tc.wantReason {
				t.Fatalf("phase %s reason %q, want %s %q", st.Phase, st.Reason, tc.wantPhase, tc.wantReason)
			}
			if tc.wantReason == ReasonDeadlineExceeded {
				if st.Message != MessageDeadlineExceeded {
					t.Errorf("message %q", st.Message)
				}
				for _, c := range st.Conditions {
					if (c.Type == corev1.PodReady || c.Type == corev1.ContainersReady) && (c.Status != corev1.ConditionFalse || c.Reason != "PodFailed") {
						t.Errorf("condition %s = %s/%s, want False/PodFailed", c.Type, c.Status, c.Reason)
					}
				}
			}
		})
	}
	t.Run("not started: no deadline yet", func(t *testing.T) {
		if _, ok := DeadlineLeft(withDeadline(1), nil, now); ok {
			t.Fatal("a pod without startTime has a deadline")
		}
	})
}

func condition(list []corev1.PodCondition, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range list {
		if list[i].Type == t {
			return &list[i]
		}
	}
	return nil
}

// TestStoppedPodKeepsIPs: once the sandbox of a finished or deleted pod is
// stopped, the status keeps the IPs it had (the kubelet's
// preserveDataFromBeforeStopping); a running pod whose sandbox is gone
// reports none.
func TestStoppedPodKeepsIPs(t *testing.T) {
	stopped := []podruntime.SandboxStatus{{ID: "s", Ready: false}}
	exited := []podruntime.ContainerStatus{cs("a", podruntime.StateExited, 1, 0), cs("b", podruntime.StateExited, 0, 0)}
	prev := &corev1.PodStatus{PodIP: "10.0.0.5", PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}, {IP: "fd00::5"}}}
	run := func(p *corev1.Pod, rt podruntime.PodStatus, terminal bool, prev *corev1.PodStatus) corev1.PodStatus {
		return Generate(Input{Pod: p, Runtime: &rt, ContainerID: func(id string) string { return id }, Terminal: terminal, Now: time.Unix(1000, 0), Previous: prev})
	}
	// Failed pod (restartPolicy Never), sandbox stopped: IPs kept from the last status.
	st := run(pod(corev1.RestartPolicyNever), podruntime.PodStatus{Sandboxes: stopped, Containers: exited}, true, prev)
	if st.Phase != corev1.PodFailed || st.PodIP != "10.0.0.5" || len(st.PodIPs) != 2 || st.PodIPs[1].IP != "fd00::5" {
		t.Fatalf("terminal: phase %s podIP %q podIPs %v, want Failed with the old IPs", st.Phase, st.PodIP, st.PodIPs)
	}
	// Deleted pod after a podsyncd restart: IPs kept from the API's copy.
	p := pod(corev1.RestartPolicyAlways)
	now := metav1.NewTime(time.Unix(900, 0))
	p.DeletionTimestamp = &now
	p.Status = *prev.DeepCopy()
	st = run(p, podruntime.PodStatus{Sandboxes: stopped}, false, nil)
	if st.PodIP != "10.0.0.5" || len(st.PodIPs) != 2 {
		t.Fatalf("terminating: podIP %q podIPs %v, want the API's IPs", st.PodIP, st.PodIPs)
	}
	// A live pod whose sandbox is not ready reports no IPs.
	st = run(pod(corev1.RestartPolicyAlways), podruntime.PodStatus{Sandboxes: stopped}, false, prev)
	if st.PodIP != "" || len(st.PodIPs) != 0 {
		t.Fatalf("live pod, sandbox down: podIP %q podIPs %v, want none", st.PodIP, st.PodIPs)
	}
	// Host network pods keep the host IP, not old pod IPs.
	h := pod(corev1.RestartPolicyNever)
	h.Spec.HostNetwork = true
	st = Generate(Input{Pod: h, Runtime: &podruntime.PodStatus{Containers: exited}, ContainerID: func(id string) string { return id }, Terminal: true, HostIPs: []string{"192.0.2.1"}, Now: time.Unix(1000, 0), Previous: prev})
	if st.PodIP != "192.0.2.1" || len(st.PodIPs) != 1 {
		t.Fatalf("host network: podIP %q podIPs %v, want the host IP", st.PodIP, st.PodIPs)
	}
}
