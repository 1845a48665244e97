package podstatus

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// setResources fills a container status's allocatedResources and resources
// as the kubelet does with in-place pod vertical scaling (GA): the allocated
// resources are the container's requests; the resources are its requests
// and limits, where for a running container the CPU request, CPU limit and
// memory limit the runtime reports replace the spec's (kept from the
// previous status of the same instance when the runtime says nothing), and
// the memory request is the actuated one. spec is the allocated container
// (the pod spec with the allocation applied), so during a resize the
// resources show what the container really has.
func setResources(cs *corev1.ContainerStatus, spec *corev1.Container, rt *podruntime.ContainerStatus, old *corev1.ContainerStatus) {
	cs.AllocatedResources = spec.Resources.Requests
	cs.Resources = statusResources(cs, spec, rt, old)
}

func statusResources(cs *corev1.ContainerStatus, spec *corev1.Container, rt *podruntime.ContainerStatus, old *corev1.ContainerStatus) *corev1.ResourceRequirements {
	res := spec.Resources.DeepCopy()
	if rt.State != podruntime.StateRunning {
		return res
	}
	var oldRes *corev1.ResourceRequirements
	if old != nil && old.State.Running != nil && old.ContainerID == cs.ContainerID {
		oldRes = old.Resources
	}
	// keep carries a value over from the previous status of this instance.
	keep := func(name corev1.ResourceName, from func(*corev1.ResourceRequirements) corev1.ResourceList, into corev1.ResourceList) {
		if oldRes == nil {
			return
		}
		if v, ok := from(oldRes)[name]; ok {
			into[name] = v.DeepCopy()
		}
	}
	limits := func(r *corev1.ResourceRequirements) corev1.ResourceList { return r.Limits }
	requests := func(r *corev1.ResourceRequirements) corev1.ResourceList { return r.Requests }
	got := rt.Resources
	if got == nil {
		got = &podruntime.ContainerResources{}
	}
	if res.Limits != nil {
		switch {
		case got.CPULimit != nil:
			// At or below the smallest effective limit both ways, the
			// spec's value stays, so the two compare equal.
			if got.CPULimit.MilliValue() > podruntime.MinMilliCPULimit || res.Limits.Cpu().MilliValue() > podruntime.MinMilliCPULimit {
				res.Limits[corev1.ResourceCPU] = got.CPULimit.DeepCopy()
			}
		default:
			keep(corev1.ResourceCPU, limits, res.Limits)
		}
		if got.MemoryLimit != nil {
			res.Limits[corev1.ResourceMemory] = got.MemoryLimit.DeepCopy()
		} else {
			keep(corev1.ResourceMemory, limits, res.Limits)
		}
	}
	if res.Requests != nil {
		switch {
		case got.CPURequest != nil:
			if got.CPURequest.MilliValue() > podruntime.MinShares || res.Requests.Cpu().MilliValue() > podruntime.MinShares {
				res.Requests[corev1.ResourceCPU] = got.CPURequest.DeepCopy()
			}
		default:
			keep(corev1.ResourceCPU, requests, res.Requests)
		}
		// No runtime reports a memory request: it is the actuated one.
		if got.MemoryRequest != nil {
			res.Requests[corev1.ResourceMemory] = got.MemoryRequest.DeepCopy()
		} else {
			keep(corev1.ResourceMemory, requests, res.Requests)
		}
	}
	return res
}

// previousStatus finds the last reported status of the named container (names
// are unique across a pod's init, regular and ephemeral containers).
func previousStatus(prev *corev1.PodStatus, name string) *corev1.ContainerStatus {
	if prev == nil {
		return nil
	}
	for _, list := range [][]corev1.ContainerStatus{prev.InitContainerStatuses, prev.ContainerStatuses, prev.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}
