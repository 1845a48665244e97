package podruntime

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ContainerResources are a running container's CPU and memory settings as
// the runtime reports them, turned back into API quantities the way the
// kubelet does (kuberuntime's toKubeContainerResources). A nil field is a
// setting the runtime did not report.
type ContainerResources struct {
	// CPURequest comes from the CPU shares.
	CPURequest *resource.Quantity
	// CPULimit comes from the CFS quota and period.
	CPULimit *resource.Quantity
	// MemoryLimit is the memory limit in bytes.
	MemoryLimit *resource.Quantity
	// MemoryRequest is not known to any runtime: it is the actuated one.
	MemoryRequest *resource.Quantity
}

// CPU conversion constants of the kubelet's cgroup manager (pkg/kubelet/cm).
const (
	// MinShares is the least CPU shares a container gets.
	MinShares = 2
	// MinMilliCPULimit is the smallest CPU limit the CFS quota can express
	// (1 ms of a 100 ms period).
	MinMilliCPULimit = 10
	sharesPerCPU     = 1024
	milliCPUToCPU    = 1000
)

// sharesToMilliCPU inverts the request → shares conversion, rounding up.
func sharesToMilliCPU(shares int64) int64 {
	if shares < MinShares {
		return 0
	}
	return int64(math.Ceil(float64(shares*milliCPUToCPU) / float64(sharesPerCPU)))
}

// quotaToMilliCPU inverts the limit → CFS quota conversion; -1 is no limit.
func quotaToMilliCPU(quota, period int64) int64 {
	if quota == -1 {
		return 0
	}
	return quota * milliCPUToCPU / period
}

func containerResources(r *runtimeapi.ContainerResources) *ContainerResources {
	l := r.GetLinux()
	if l == nil {
		return nil
	}
	out := &ContainerResources{}
	if l.CpuPeriod > 0 {
		if m := quotaToMilliCPU(l.CpuQuota, l.CpuPeriod); m > 0 {
			out.CPULimit = resource.NewMilliQuantity(m, resource.DecimalSI)
		}
	}
	if l.CpuShares > 0 {
		if m := sharesToMilliCPU(l.CpuShares); m > 0 {
			out.CPURequest = resource.NewMilliQuantity(m, resource.DecimalSI)
		}
	}
	if l.MemoryLimitInBytes > 0 {
		out.MemoryLimit = resource.NewQuantity(l.MemoryLimitInBytes, resource.BinarySI)
	}
	if out.CPULimit == nil && out.CPURequest == nil && out.MemoryLimit == nil {
		return nil
	}
	return out
}

// withActuated fills what the runtime did not report from the container's
// actuated resources, as the kubelet's toKubeContainerStatus does: all of it
// when the runtime reported nothing, else the memory request.
func (m *Manager) withActuated(uid types.UID, name string, r *ContainerResources) *ContainerResources {
	if m.opts.Actuated == nil || (r != nil && r.MemoryRequest != nil) {
		return r
	}
	act, ok := m.opts.Actuated.Actuated(uid, name)
	if !ok {
		return r
	}
	if r == nil {
		return &ContainerResources{
			CPURequest: act.Requests.Cpu(), CPULimit: act.Limits.Cpu(),
			MemoryRequest: act.Requests.Memory(), MemoryLimit: act.Limits.Memory(),
		}
	}
	if q := act.Requests[corev1.ResourceMemory]; !q.IsZero() {
		r.MemoryRequest = &q
	}
	return r
}
