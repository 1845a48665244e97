package podruntime

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// memActuated is an in-memory ActuatedState.
type memActuated map[string]corev1.ResourceRequirements

func (m memActuated) Actuated(_ types.UID, name string) (corev1.ResourceRequirements, bool) {
	r, ok := m[name]
	return r, ok
}

func (m memActuated) SetActuated(_ types.UID, name string, r corev1.ResourceRequirements) error {
	m[name] = r
	return nil
}

// updateRecorder records UpdateContainerResources calls (the only CRI call
// doResize makes); failOn makes the call for that container ID fail.
type updateRecorder struct {
	criapi.RuntimeService
	calls  []string
	failOn string
	usage  map[string]uint64 // memory usage by container ID (default 1 MiB)
}

func (u *updateRecorder) ContainerStats(_ context.Context, id string) (*runtimeapi.ContainerStats, error) {
	v, ok := u.usage[id]
	if !ok {
		v = 1 << 20
	}
	return &runtimeapi.ContainerStats{Memory: &runtimeapi.MemoryUsage{UsageBytes: &runtimeapi.UInt64Value{Value: v}}}, nil
}

func (u *updateRecorder) UpdateContainerResources(_ context.Context, id string, r *runtimeapi.ContainerResources) error {
	l := r.Linux
	u.calls = append(u.calls, fmt.Sprintf("%s shares=%d quota=%d mem=%d", id, l.CpuShares, l.CpuQuota, l.MemoryLimitInBytes))
	if id == u.failOn {
		return errors.New("refused")
	}
	return nil
}

func rr(cpuReq, cpuLim, memReq, memLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse(memLim)},
	}
}

func resizePod() *corev1.Pod {
	p := testPod(corev1.RestartPolicyAlways, 0)
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Image: "img"})
	return p
}

func TestComputeResize(t *testing.T) {
	old := rr("100m", "200m", "20Mi", "40Mi")
	act := memActuated{"a": old, "b": old, "c": old}
	pod := resizePod()
	pod.Spec.Containers[0].Resources = rr("200m", "400m", "20Mi", "60Mi") // a: both up
	pod.Spec.Containers[1].Resources = rr("50m", "100m", "20Mi", "30Mi")  // b: both down
	pod.Spec.Containers[2].Resources = rr("100m", "200m", "30Mi", "40Mi") // c: memory request only
	st := PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(pod, "a"), running(pod, "b"), running(pod, "c")}}
	rt := &updateRecorder{}
	m := NewManager(rt, nil, Options{Actuated: act, MemoryCapacity: 1 << 30})
	a := m.ComputePodActions(pod, &st)
	if len(a.Kill) != 0 || len(a.Start) != 0 {
		t.Fatalf("NotRequired resize kills %v / starts %v", a.Kill, a.Start)
	}
	order := func(r corev1.ResourceName) []string {
		var out []string
		for _, u := range a.Resize[r] {
			out = append(out, u.Name)
		}
		return out
	}
	// Decreases first, then increases, per resource.
	if got := fmt.Sprint(order(corev1.ResourceMemory)); got != "[b a c]" {
		t.Errorf("memory updates %s, want [b a c]", got)
	}
	if got := fmt.Sprint(order(corev1.ResourceCPU)); got != "[b a]" {
		t.Errorf("cpu updates %s, want [b a]", got)
	}
	if err := m.doResize(context.Background(), pod, &a); err != nil {
		t.Fatal(err)
	}
	// Memory updates keep the current CPU; the CPU updates then carry the new memory.
	want := []string{
		"b-id shares=102 quota=20000 mem=31457280",
		"a-id shares=102 quota=20000 mem=62914560",
		"c-id shares=102 quota=20000 mem=41943040",
		"b-id shares=51 quota=10000 mem=31457280",
		"a-id shares=204 quota=40000 mem=62914560",
	}
	if fmt.Sprint(rt.calls) != fmt.Sprint(want) {
		t.Errorf("updates\n %v\nwant\n %v", rt.calls, want)
	}
	for _, c := range pod.Spec.Containers {
		got := act[c.Name]
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if !got.Requests[r].Equal(c.Resources.Requests[r]) || !got.Limits[r].Equal(c.Resources.Limits[r]) {
				t.Errorf("%s: actuated %v, want %v", c.Name, got, c.Resources)
			}
		}
	}
	// Nothing left to do once actuated.
	if a := m.ComputePodActions(pod, &st); len(a.Resize) != 0 {
		t.Errorf("second pass resizes %v", a.Resize)
	}
}

func TestComputeResizeRestartAndErrors(t *testing.T) {
	old := rr("100m", "200m", "20Mi", "40Mi")
	act := memActuated{"a": old, "b": old}
	pod := resizePod()
	pod.Spec.Containers = pod.Spec.Containers[:2]
	pod.Spec.Containers[0].Resources = rr("100m", "200m", "20Mi", "60Mi")
	pod.Spec.Containers[0].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	pod.Spec.Containers[1].Resources = rr("300m", "400m", "20Mi", "40Mi")
	// A CPU-only change of a container that restarts for memory stays in place.
	pod.Spec.Containers[1].ResizePolicy = []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer}}
	st := PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(pod, "a"), running(pod, "b")}}
	rt := &updateRecorder{failOn: "b-id"}
	m := NewManager(rt, nil, Options{Actuated: act})
	a := m.ComputePodActions(pod, &st)
	if a.Kill["a-id"] != "Container a resize requires restart" || fmt.Sprint(a.Start) != "[0]" || !a.UpdatePodResources {
		t.Fatalf("RestartContainer: kill %v start %v", a.Kill, a.Start)
	}
	if fmt.Sprint(len(a.Resize[corev1.ResourceCPU])) != "1" || a.Resize[corev1.ResourceCPU][0].Name != "b" {
		t.Fatalf("cpu updates %v", a.Resize)
	}
	err := m.doResize(context.Background(), pod, &a)
	if err == nil || err.Message != "failed to update resources of container b: refused" {
		t.Fatalf("failed update: %v", err)
	}
	if got := act["b"]; !got.Requests[corev1.ResourceCPU].Equal(resource.MustParse("100m")) {
		t.Errorf("a refused update was recorded as actuated: %v", got)
	}

	// Not running: nothing to resize. No actuated state: treated as zero,
	// as upstream, so b's memory "changed" and its policy restarts it.
	exitedPod := PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{exited(pod, "a", 0), running(pod, "b")}}
	m2 := NewManager(rt, nil, Options{Actuated: memActuated{}})
	a2 := m2.ComputePodActions(pod, &exitedPod)
	if _, killed := a2.Kill["a-id"]; killed || a2.Kill["b-id"] != "Container b resize requires restart" || len(a2.Resize) != 0 {
		t.Errorf("actions %+v", a2)
	}
	// Without an ActuatedState nothing is resized.
	if a3 := NewManager(rt, nil, Options{}).ComputePodActions(pod, &st); len(a3.Resize) != 0 || len(a3.Kill) != 0 {
		t.Errorf("resize without actuated state: %+v", a3)
	}
}

func TestResizeRefusesMemoryBelowUsage(t *testing.T) {
	old := rr("100m", "200m", "20Mi", "40Mi")
	act := memActuated{"a": old, "b": old}
	pod := resizePod()
	pod.Spec.Containers = pod.Spec.Containers[:2]
	pod.Spec.Containers[0].Resources = rr("100m", "200m", "20Mi", "60Mi") // up: not checked
	pod.Spec.Containers[1].Resources = rr("200m", "200m", "20Mi", "30Mi") // down below its usage
	st := PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(pod, "a"), running(pod, "b")}}
	rt := &updateRecorder{usage: map[string]uint64{"a-id": 50 << 20, "b-id": 35 << 20}}
	m := NewManager(rt, nil, Options{Actuated: act})
	a := m.ComputePodActions(pod, &st)
	err := m.doResize(context.Background(), pod, &a)
	want := `cannot decrease memory limits: attempting to set container "b" memory limit (31457280) below current usage (36700160)`
	if err == nil || err.Message != want {
		t.Fatalf("error %v, want %s", err, want)
	}
	if len(rt.calls) != 0 {
		t.Errorf("updates made although the resize was refused: %v", rt.calls)
	}
	rt.usage["b-id"] = 10 << 20
	if err := m.doResize(context.Background(), pod, &a); err != nil || len(rt.calls) != 3 {
		t.Errorf("resize within usage: %v, calls %v", err, rt.calls)
	}
}

// cgroupRecorder records ResizePod calls in the same log as the updates.
type cgroupRecorder struct{ rt *updateRecorder }

func (c cgroupRecorder) ResizePod(from, to *corev1.Pod, grow bool) error {
	c.rt.calls = append(c.rt.calls, fmt.Sprintf("pod grow=%v from=%s to=%s", grow, from.Spec.Containers[0].Resources.Limits.Cpu(), to.Spec.Containers[0].Resources.Limits.Cpu()))
	return nil
}

func TestResizePodCgroupAroundContainers(t *testing.T) {
	act := memActuated{"a": rr("100m", "200m", "20Mi", "40Mi")}
	pod := resizePod()
	pod.Spec.Containers = pod.Spec.Containers[:1]
	pod.Spec.Containers[0].Resources = rr("300m", "400m", "20Mi", "40Mi")
	st := PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{running(pod, "a")}}
	rt := &updateRecorder{}
	m := NewManager(rt, nil, Options{Actuated: act, PodCgroup: cgroupRecorder{rt}})
	a := m.ComputePodActions(pod, &st)
	if err := m.doResize(context.Background(), pod, &a); err != nil {
		t.Fatal(err)
	}
	want := "[pod grow=true from=200m to=400m a-id shares=307 quota=40000 mem=41943040 pod grow=false from=200m to=400m]"
	if got := fmt.Sprint(rt.calls); got != want {
		t.Errorf("calls %s\nwant  %s", got, want)
	}
}
