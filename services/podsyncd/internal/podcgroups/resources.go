package podcgroups

import (
	corev1 "k8s.io/api/core/v1"
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
}

// ForPod is the pod cgroup's configuration as the kubelet's
// ResourceConfigForPod computes it (pod-level resources included): CPU
// shares from the summed CPU requests for every pod (2 for BestEffort);
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
	return out
}

// ForNode is the configuration of the node's pod cgroup (kubepods) from
// what pods may use in all, as the kubelet enforces node allocatable:
// CPU shares for the CPUs, the memory limit and the PIDs limit ("pid")
// that alloc holds.
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
