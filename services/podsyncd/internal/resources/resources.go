package resources

import (
	"errors"
	"fmt"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubectlqos "k8s.io/kubectl/pkg/util/qos"

	"github.com/microlet/microlet/internal/podutil"
)

// The kubelet's cgroup constants (pkg/kubelet/cm).
const (
	// MinShares is the least CPU shares a container gets (and what a
	// container without a CPU request gets).
	MinShares = 2
	// MaxShares is the most CPU shares the kernel accepts.
	MaxShares = 262144
	// SharesPerCPU is the shares of one whole CPU.
	SharesPerCPU = 1024
	// QuotaPeriod is the CFS period in microseconds (100 ms).
	QuotaPeriod = 100000
	// MinQuota is the smallest CFS quota, 1 ms.
	MinQuota = 1000
)

// OOM score adjustments of the kubelet's QoS policy (pkg/kubelet/qos).
const (
	// GuaranteedOOMScoreAdj is given to Guaranteed and node-critical pods.
	GuaranteedOOMScoreAdj = -997
	// BestEffortOOMScoreAdj is given to BestEffort pods.
	BestEffortOOMScoreAdj = 1000
)

// QOSClass is the pod's QoS class: the recorded one when the status has it,
// else computed from requests and limits (pod-level resources included).
func QOSClass(pod *corev1.Pod) corev1.PodQOSClass { return kubectlqos.GetPodQOS(pod) }

// MilliCPUToShares converts a CPU request in millicores to cgroup CPU
// shares, within [MinShares, MaxShares]; no request is MinShares.
func MilliCPUToShares(milliCPU int64) int64 {
	if milliCPU == 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / 1000
	return min(max(shares, MinShares), MaxShares)
}

// MilliCPUToQuota converts a CPU limit in millicores to a CFS quota over
// period microseconds; no limit is 0 (unlimited), the least is MinQuota.
func MilliCPUToQuota(milliCPU, period int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*period/1000, MinQuota)
}

func podLevelSet(pod *corev1.Pod) bool { return resourcehelper.IsPodLevelResourcesSet(pod) }

// limit is the container's limit of r, or the pod-level limit when the
// container sets none and the pod has pod-level resources.
func limit(pod *corev1.Pod, c *corev1.Container, r corev1.ResourceName) resource.Quantity {
	q := c.Resources.Limits[r]
	if q.IsZero() && podLevelSet(pod) {
		return pod.Spec.Resources.Limits[r]
	}
	return q
}

// Container is the CRI resources of container c: CPU shares from the request
// (or the limit when only a limit is set), CFS quota over a 100 ms period
// from the CPU limit, the memory limit, and the OOM score adjustment of the
// pod's QoS class; memoryCapacity is the machine's memory in bytes.
func Container(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) *runtimeapi.LinuxContainerResources {
	cpuLimit := limit(pod, c, corev1.ResourceCPU)
	memLimit := limit(pod, c, corev1.ResourceMemory)
	out := &runtimeapi.LinuxContainerResources{CpuPeriod: QuotaPeriod}
	if req, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		out.CpuShares = MilliCPUToShares(req.MilliValue())
	} else {
		// The API defaults a missing request to the limit; older objects
		// may lack that default, so repeat it here as the kubelet does.
		out.CpuShares = MilliCPUToShares(cpuLimit.MilliValue())
	}
	out.CpuQuota = MilliCPUToQuota(cpuLimit.MilliValue(), QuotaPeriod)
	out.MemoryLimitInBytes = memLimit.Value()
	out.OomScoreAdj = int64(OOMScoreAdj(pod, c, memoryCapacity))
	return out
}

func isSidecar(pod *corev1.Pod, c *corev1.Container) bool {
	if !podutil.IsSidecar(c) {
		return false
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == c.Name {
			return true
		}
	}
	return false
}

// OOMScoreAdj is the kubelet's OOM score adjustment of container c:
// Guaranteed (and node-critical) pods -997, BestEffort 1000, Burstable
// 1000 - 1000*request/capacity kept within [3, 999], where the request
// includes an even share of a pod-level request the containers leave
// unclaimed, and a sidecar gets no more than the pod's smallest regular
// container.
func OOMScoreAdj(pod *corev1.Pod, c *corev1.Container, memoryCapacity int64) int {
	if podutil.IsNodeCritical(pod) {
		return GuaranteedOOMScoreAdj
	}
	switch QOSClass(pod) {
	case corev1.PodQOSGuaranteed:
		return GuaranteedOOMScoreAdj
	case corev1.PodQOSBestEffort:
		return BestEffortOOMScoreAdj
	}
	if memoryCapacity <= 0 {
		// Without the capacity the share cannot be computed; the least
		// protected Burstable value keeps BestEffort pods below it.
		return BestEffortOOMScoreAdj - 1
	}
	var extra int64
	if resourcehelper.IsPodLevelRequestsSet(pod) {
		extra = remainingPodMemoryPerContainer(pod)
	}
	adj := 1000 - 1000*(c.Resources.Requests.Memory().Value()+extra)/memoryCapacity
	if isSidecar(pod, c) && len(pod.Spec.Containers) > 0 {
		if minAdj := 1000 - 1000*(minRegularMemoryRequest(pod)+extra)/memoryCapacity; adj > minAdj {
			adj = minAdj
		}
	}
	// A Guaranteed pod using all the memory scores about 10: Burstable stays
	// above that, and below BestEffort.
	if adj < 1000+GuaranteedOOMScoreAdj {
		return 1000 + GuaranteedOOMScoreAdj
	}
	if adj == BestEffortOOMScoreAdj {
		return BestEffortOOMScoreAdj - 1
	}
	return int(adj)
}

func minRegularMemoryRequest(pod *corev1.Pod) int64 {
	least := pod.Spec.Containers[0].Resources.Requests.Memory().Value()
	for _, c := range pod.Spec.Containers[1:] {
		least = min(least, c.Resources.Requests.Memory().Value())
	}
	return least
}

// remainingPodMemoryPerContainer is the part of a pod-level memory request
// that no container claims, split evenly over all (init included) containers.
func remainingPodMemoryPerContainer(pod *corev1.Pod) int64 {
	podReq := pod.Spec.Resources.Requests.Memory()
	if podReq.IsZero() {
		return 0
	}
	n := int64(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
	if n == 0 {
		return 0
	}
	claimed := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
	return (podReq.Value() - claimed.Memory().Value()) / n
}

// PodMemoryLimit is the memory limit of the whole pod as the kubelet would
// put on its cgroup: the effective sum of the containers' limits (init
// containers and sidecars counted as the scheduler does) or the pod-level
// limit; ok is false when the pod is not bounded (BestEffort, or a Burstable
// pod with a container without a memory limit).
func PodMemoryLimit(pod *corev1.Pod) (bytes int64, ok bool) {
	declared := true
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{
		ContainerFn: func(res corev1.ResourceList, _ resourcehelper.ContainerType) {
			if res.Memory().IsZero() {
				declared = false
			}
		},
	})
	if podLevelSet(pod) && !pod.Spec.Resources.Limits.Memory().IsZero() {
		declared = true
	}
	switch QOSClass(pod) {
	case corev1.PodQOSBestEffort:
		return 0, false
	case corev1.PodQOSBurstable:
		if !declared {
			return 0, false
		}
	}
	v := limits.Memory().Value()
	return v, v > 0
}

// MemoryCapacity is the machine's memory in bytes (MemTotal, which is what
// the kubelet's machine info reports as memory capacity).
func MemoryCapacity() (int64, error) {
	mi, err := procfs.NewDefaultFS()
	if err != nil {
		return 0, err
	}
	m, err := mi.Meminfo()
	if err != nil {
		return 0, fmt.Errorf("meminfo: %w", err)
	}
	if m.MemTotalBytes == nil || *m.MemTotalBytes == 0 {
		return 0, errors.New("meminfo: no MemTotal")
	}
	return int64(*m.MemTotalBytes), nil //nolint:gosec // memory sizes fit in int64
}
