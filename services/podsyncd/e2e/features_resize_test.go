package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestPodResize proves in-place pod resize on the real stack: pods/resize
// patches of a running pod's CPU and memory, up and down, reach the
// containers' cgroups (read inside them) and the status (resources,
// allocatedResources, no resize condition left, observedGeneration); a
// NotRequired container keeps its instance (restartCount 0, same ID) and
// a RestartContainer one is restarted once; a memory limit below the
// container's usage is refused (PodResizeInProgress/Error); a resize that does not fit
// beside another pod is PodResizePending/Deferred with the admission
// message, stays so, with the old allocation, across a podsyncd crash, and
// is applied once the other pod is gone; a podsyncd crash keeps the
// actuated resources, so the next resize restarts nothing.
func TestPodResize(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()

	notRequired := []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired},
	}
	restartOnMemory := []corev1.ContainerResizePolicy{
		{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
		{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer},
	}
	p := s.Pod("resize", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 1; done")
	p.Spec.Containers[0].Name = "nr"
	p.Spec.Containers[0].ResizePolicy = notRequired
	p.Spec.Containers[0].Resources = res("100m", "200m", "20Mi", "40Mi")
	rc := *p.Spec.Containers[0].DeepCopy()
	rc.Name, rc.ResizePolicy = "rc", restartOnMemory
	p.Spec.Containers = append(p.Spec.Containers, rc)
	s.Create(p)
	first := s.waitResized(t, "resize", map[string]corev1.ResourceRequirements{
		"nr": res("100m", "200m", "20Mi", "40Mi"), "rc": res("100m", "200m", "20Mi", "40Mi"),
	})
	ids := map[string]string{}
	for _, cs := range first.Status.ContainerStatuses {
		ids[cs.Name] = cs.ContainerID
	}
	s.checkCgroups(t, first, "nr", 102, 20000, 40<<20)

	// check waits for the resize, then checks the cgroups and restarts.
	check := func(t *testing.T, want map[string]corev1.ResourceRequirements, restarts map[string]int32) *corev1.Pod {
		t.Helper()
		got := s.waitResized(t, "resize", want)
		for _, cs := range got.Status.ContainerStatuses {
			if cs.RestartCount != restarts[cs.Name] {
				t.Errorf("%s: restartCount %d, want %d", cs.Name, cs.RestartCount, restarts[cs.Name])
			}
			if restarts[cs.Name] == 0 && cs.ContainerID != ids[cs.Name] {
				t.Errorf("%s: container %s replaced by %s although its resize needs no restart", cs.Name, ids[cs.Name], cs.ContainerID)
			}
			w := want[cs.Name]
			s.checkCgroups(t, got, cs.Name, sharesOf(w), quotaOf(w), w.Limits.Memory().Value())
		}
		return got
	}

	t.Run("increase and decrease, NotRequired in place, RestartContainer restarted", func(t *testing.T) {
		s.t = t
		want := map[string]corev1.ResourceRequirements{
			"nr": res("200m", "400m", "30Mi", "60Mi"), // all up
			"rc": res("50m", "100m", "20Mi", "60Mi"),  // CPU down in place, memory limit up: restart
		}
		s.resize(t, "resize", want)
		check(t, want, map[string]int32{"nr": 0, "rc": 1})
		s.waitEventReason(t, "resize", "ResizeCompleted", "Pod resize completed: ")

		want["nr"] = res("100m", "150m", "20Mi", "30Mi") // all down, memory limit first
		s.resize(t, "resize", want)
		got := check(t, want, map[string]int32{"nr": 0, "rc": 1})

		// A memory limit below what the container uses is refused before
		// anything changes: PodResizeInProgress with reason Error; putting
		// the spec back ends the resize.
		s.execIn(got, "nr", "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1048576", "count=20")
		low := map[string]corev1.ResourceRequirements{"nr": res("100m", "150m", "10Mi", "12Mi"), "rc": want["rc"]}
		s.resize(t, "resize", low)
		failed := s.WaitPod("default", "resize", "resize Error", func(p *corev1.Pod) bool {
			c := condition(p, corev1.PodResizeInProgress)
			return c != nil && c.Reason == corev1.PodReasonError
		})
		// podsyncd's check reads the runtime's (possibly cached) usage
		// sample; when that is older than the write, runc's own refusal
		// is the error.
		if msg := condition(failed, corev1.PodResizeInProgress).Message; !strings.HasPrefix(msg, `cannot decrease memory limits: attempting to set container "nr" memory limit (12582912) below current usage (`) &&
			!(strings.HasPrefix(msg, "failed to update resources of container nr: ") && strings.Contains(msg, "unable to set memory limit to 12582912")) {
			t.Errorf("PodResizeInProgress message %q", msg)
		}
		for _, cs := range failed.Status.ContainerStatuses {
			if cs.Name == "nr" && cs.Resources.Limits.Memory().Value() != 30<<20 {
				t.Errorf("nr reports memory limit %s after a refused resize, want the actual 30Mi", cs.Resources.Limits.Memory())
			}
		}
		s.waitEventReason(t, "resize", "ResizeError", "Pod resize error: ")
		s.resize(t, "resize", want)
		check(t, want, map[string]int32{"nr": 0, "rc": 1})
	})

	t.Run("deferred beside another pod, kept across a podsyncd crash, applied once it fits", func(t *testing.T) {
		s.t = t
		n, err := s.admin.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		alloc := n.Status.Allocatable.Cpu().MilliValue()
		// The hog leaves 300m: the resize pod's 150m fit, 650m do not.
		hog := s.Pod("hog", corev1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 1; done")
		hog.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: *resource.NewMilliQuantity(alloc-300, resource.DecimalSI)}}
		s.Create(hog)
		s.WaitPod("default", "hog", "Running", func(p *corev1.Pod) bool { return ready(p) })

		want := map[string]corev1.ResourceRequirements{
			"nr": res("600m", "800m", "20Mi", "30Mi"),
			"rc": res("50m", "100m", "20Mi", "60Mi"),
		}
		s.resize(t, "resize", want)
		pending := func(p *corev1.Pod) bool {
			c := condition(p, corev1.PodResizePending)
			return c != nil && c.Reason == corev1.PodReasonDeferred && c.ObservedGeneration == p.Generation
		}
		got := s.WaitPod("default", "resize", "resize Deferred", pending)
		c := condition(got, corev1.PodResizePending)
		if !strings.HasPrefix(c.Message, "Node didn't have enough resource: cpu, requested: ") {
			t.Errorf("PodResizePending message %q, want the admission's", c.Message)
		}
		s.waitEventReason(t, "resize", "ResizeDeferred", "Pod resize Deferred: ")

		pid := s.servicePID("podsyncd")
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.Eventually("podsyncd restarted", 2*time.Minute, func() (bool, string) {
			np := s.servicePID("podsyncd")
			return np != 0 && np != pid, "pid " + strconv.Itoa(np)
		})
		// A spec change the new podsyncd must observe shows it reported the
		// pod; the allocation must still be the old one.
		deadline := int64(36000)
		s.update(t, "resize", func(p *corev1.Pod) { p.Spec.ActiveDeadlineSeconds = &deadline })
		got = s.WaitPod("default", "resize", "re-reported after the restart, still Deferred", func(p *corev1.Pod) bool {
			return pending(p) && p.Status.ObservedGeneration == p.Generation
		})
		for _, cs := range got.Status.ContainerStatuses {
			if cs.Name == "nr" && cs.AllocatedResources.Cpu().MilliValue() != 100 {
				t.Errorf("allocated CPU after the restart %s, want the old 100m", cs.AllocatedResources.Cpu())
			}
		}

		s.deletePod("hog")
		check(t, want, map[string]int32{"nr": 0, "rc": 1})
	})

	t.Run("after a podsyncd crash a CPU resize restarts nothing", func(t *testing.T) {
		s.t = t
		pid := s.servicePID("podsyncd")
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.Eventually("podsyncd restarted", 2*time.Minute, func() (bool, string) {
			np := s.servicePID("podsyncd")
			return np != 0 && np != pid, "pid " + strconv.Itoa(np)
		})
		// rc restarts for a memory change only: had the actuated memory
		// been lost, this CPU-only resize would restart it.
		want := map[string]corev1.ResourceRequirements{
			"nr": res("100m", "200m", "20Mi", "30Mi"),
			"rc": res("150m", "300m", "20Mi", "60Mi"),
		}
		s.resize(t, "resize", want)
		check(t, want, map[string]int32{"nr": 0, "rc": 1})
	})
}

// res builds requests and limits.
func res(cpuReq, cpuLim, memReq, memLim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuReq), corev1.ResourceMemory: resource.MustParse(memReq)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLim), corev1.ResourceMemory: resource.MustParse(memLim)},
	}
}

// sharesOf and quotaOf are the kubelet's CPU shares and CFS quota (100 ms
// period) for r.
func sharesOf(r corev1.ResourceRequirements) int64 {
	return r.Requests.Cpu().MilliValue() * 1024 / 1000
}
func quotaOf(r corev1.ResourceRequirements) int64 { return r.Limits.Cpu().MilliValue() * 100 }

// resize patches the pod's container resources through pods/resize.
func (s *stack) resize(t *testing.T, name string, want map[string]corev1.ResourceRequirements) {
	t.Helper()
	type ctr struct {
		Name      string                      `json:"name"`
		Resources corev1.ResourceRequirements `json:"resources"`
	}
	// In the pod's container order (its names sort that way): the API
	// server refuses a patch that reorders them.
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	var cs []ctr
	for _, n := range names {
		cs = append(cs, ctr{n, want[n]})
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"containers": cs}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.admin.CoreV1().Pods("default").Patch(context.Background(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "resize"); err != nil {
		t.Fatalf("resize patch: %v", err)
	}
}

// waitResized waits as the conformance helper does (observedGeneration
// caught up, no resize condition, Ready) and then checks every container's
// status resources and allocatedResources.
func (s *stack) waitResized(t *testing.T, name string, want map[string]corev1.ResourceRequirements) *corev1.Pod {
	t.Helper()
	got := s.WaitPod("default", name, "resized", func(p *corev1.Pod) bool {
		if p.Status.ObservedGeneration < p.Generation || !ready(p) {
			return false
		}
		if condition(p, corev1.PodResizePending) != nil || condition(p, corev1.PodResizeInProgress) != nil {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			w := want[cs.Name]
			if cs.Resources == nil || !equality.Semantic.DeepEqual(*cs.Resources, w) || !equality.Semantic.DeepEqual(cs.AllocatedResources, w.Requests) {
				return false
			}
		}
		return len(p.Status.ContainerStatuses) == len(want)
	})
	return got
}

// checkCgroups reads the container's cgroup files (v1 or v2) from inside it.
func (s *stack) checkCgroups(t *testing.T, p *corev1.Pod, container string, shares, quota, memory int64) {
	t.Helper()
	out := strings.Fields(s.execIn(p, container, "sh", "-c",
		`if [ -f /sys/fs/cgroup/cpu.max ]; then cat /sys/fs/cgroup/cpu.weight; cut -d' ' -f1 /sys/fs/cgroup/cpu.max; cat /sys/fs/cgroup/memory.max;
else cat /sys/fs/cgroup/cpu/cpu.shares /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes; fi`))
	if len(out) != 3 {
		t.Fatalf("%s: cgroup files read %q", container, out)
	}
	wantShares := strconv.FormatInt(shares, 10)
	if _, code := s.execCode(p, container, "test", "-f", "/sys/fs/cgroup/cpu.max"); code == 0 {
		wantShares = strconv.FormatInt(1+((shares-2)*9999)/262142, 10)
	}
	if got := fmt.Sprint(out); got != fmt.Sprint([]string{wantShares, strconv.FormatInt(quota, 10), strconv.FormatInt(memory, 10)}) {
		t.Errorf("%s: cgroup shares/quota/memory %v, want %s %d %d", container, out, wantShares, quota, memory)
	}
}

// waitEventReason waits for an event on a default-namespace pod with reason
// and a message starting with prefix.
func (s *stack) waitEventReason(t *testing.T, pod, reason, prefix string) {
	t.Helper()
	s.waitEventWhere(t, "default", pod, reason, "starting "+prefix, func(m string) bool { return strings.HasPrefix(m, prefix) })
}
