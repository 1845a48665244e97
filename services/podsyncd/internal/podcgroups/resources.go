package podcgroups

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/microlet/microlet/services/podsyncd/internal/resources"
)

// Resources are the limits written to one cgroup; nil fields are left as
// they are.
type Resources struct {
	// CPUShares is cpu.shares (cgroup v1) or, converted, cpu.weight (v2).
	CPUShares *uint64
	// CPUQuota and CPUPeriod are the CFS bandwidth in microseconds; a quota
	// of -1 is unlimited.
	CPUQuota  *int64
	CPUPeriod *uint64
	// Memory is the memory limit in bytes.
	Memory *int64
	// PidsLimit is pids.max.
	PidsLimit *int64
	// HugePageLimits maps a huge page size to its limit, both in bytes;
	// nil leaves hugetlb alone, else every page size the host has and
	// the map lacks is limited to 0 (the kubelet's rule: a pod uses only
	// the huge pages it asked for).
	HugePageLimits map[int64]int64
}

// hugePageLimits sums the hugepages-<size> quantities of rl by page size.
func hugePageLimits(rl corev1.ResourceList) map[int64]int64 {
	out := map[int64]int64{}
	for name, q := range rl {
		size, ok := strings.CutPrefix(string(name), corev1.ResourceHugePagesPrefix)
		if !ok {
			continue
		}
		ps, err := resource.ParseQuantity(size)
		if err != nil {
			continue // the API validates the name
		}
		out[ps.Value()] += q.Value()
	}
	return out
}

// ForPod is the pod cgroup's configuration as the kubelet's
// ResourceConfigForPod computes it (pod-level resources and RuntimeClass
// overhead included): the huge page limits of the hugepages-<size>
// requests for every pod; CPU shares from the summed CPU requests for
// every pod (2 for BestEffort);
// for Guaranteed pods, and for Burstable pods whose every container (or
// the pod level) limits the resource, the CFS quota over period
// microseconds from the summed CPU limits (-1, unlimited, unless
// enforceCPULimits) and the summed memory limit.
func ForPod(pod *corev1.Pod, enforceCPULimits bool, period uint64) Resources {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	cpuDeclared, memDeclared := true, true
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{
		ContainerFn: func(res corev1.ResourceList, _ resourcehelper.ContainerType) {
			if res.Cpu().IsZero() {
				cpuDeclared = false
			}
			if res.Memory().IsZero() {
				memDeclared = false
			}
		},
	})
	if resourcehelper.IsPodLevelResourcesSet(pod) {
		if !pod.Spec.Resources.Limits.Cpu().IsZero() {
			cpuDeclared = true
		}
		if !pod.Spec.Resources.Limits.Memory().IsZero() {
			memDeclared = true
		}
	}
	shares := uint64(resources.MilliCPUToShares(reqs.Cpu().MilliValue()))
	quota := resources.MilliCPUToQuota(limits.Cpu().MilliValue(), int64(period))
	if !enforceCPULimits {
		quota = -1
	}
	mem := limits.Memory().Value()

	var out Resources
	switch resources.QOSClass(pod) {
	case corev1.PodQOSGuaranteed:
		out = Resources{CPUShares: &shares, CPUQuota: &quota, CPUPeriod: &period, Memory: &mem}
	case corev1.PodQOSBurstable:
		out.CPUShares = &shares
		if cpuDeclared {
			out.CPUQuota, out.CPUPeriod = &quota, &period
		}
		if memDeclared {
			out.Memory = &mem
		}
	default:
		minShares := uint64(resources.MinShares)
		out.CPUShares = &minShares
	}
	out.HugePageLimits = hugePageLimits(reqs)
	return out
}

// ForNode is the configuration of the node's pod cgroup (kubepods) from
// what pods may use in all, as the kubelet enforces node allocatable:
// CPU shares for the CPUs, the memory limit, the PIDs limit ("pid") and
// the huge page limits (hugepages-<size>) that alloc holds.
func ForNode(alloc corev1.ResourceList) Resources {
	var out Resources
	if q, ok := alloc[corev1.ResourceCPU]; ok {
		s := uint64(resources.MilliCPUToShares(q.MilliValue()))
		out.CPUShares = &s
	}
	if q, ok := alloc[corev1.ResourceMemory]; ok {
		v := q.Value()
		out.Memory = &v
	}
	if q, ok := alloc["pid"]; ok {
		v := q.Value()
		out.PidsLimit = &v
	}
	// Only when alloc counts huge pages: the allocatable podsyncd computes
	// holds none (no huge page capacity is measured), and an empty map
	// would forbid every page size below kubepods.
	if h := hugePageLimits(alloc); len(h) > 0 {
		out.HugePageLimits = h
	}
	return out
}

// burstableShares is the Burstable QoS cgroup's CPU shares: the summed CPU
// requests of the Burstable pods among pods (the kubelet's
// setCPUCgroupConfig).
func burstableShares(pods []*corev1.Pod) uint64 {
	var milli int64
	for _, p := range pods {
		if resources.QOSClass(p) != corev1.PodQOSBurstable {
			continue
		}
		reqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		milli += reqs.Cpu().MilliValue()
	}
	return uint64(resources.MilliCPUToShares(milli))
}
