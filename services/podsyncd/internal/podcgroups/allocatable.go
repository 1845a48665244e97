package podcgroups

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/prometheus/procfs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ResourcePID is the kubelet's reservable "pid" resource.
const ResourcePID corev1.ResourceName = "pid"

// NodeAllocatable is what kubepods may use, as the kubelet enforces node
// allocatable on it ("pods" in enforceNodeAllocatable): the machine's CPUs
// and memory (memCapacity bytes) minus the kube-reserved and
// system-reserved maps ("cpu=100m,memory=256Mi" style; cpu, memory, pid,
// ephemeral-storage and hugepages-<size> are accepted, and only the first
// three bound the cgroup). PIDs are bounded only when a reservation names
// them (the kernel's pid_max minus the reservation).
func NodeAllocatable(memCapacity int64, reserved ...map[string]string) (corev1.ResourceList, error) {
	res := corev1.ResourceList{}
	for _, m := range reserved {
		for k, v := range m {
			switch corev1.ResourceName(k) {
			case corev1.ResourceCPU, corev1.ResourceMemory, ResourcePID, corev1.ResourceEphemeralStorage:
			default:
				if !strings.HasPrefix(k, corev1.ResourceHugePagesPrefix) {
					return nil, fmt.Errorf("reserved resource %q: want cpu, memory, pid, ephemeral-storage or hugepages-<size>", k)
				}
			}
			q, err := resource.ParseQuantity(v)
			if err != nil || q.Sign() < 0 {
				return nil, fmt.Errorf("reserved resource %q: bad quantity %q", k, v)
			}
			sum := res[corev1.ResourceName(k)]
			sum.Add(q)
			res[corev1.ResourceName(k)] = sum
		}
	}
	out := corev1.ResourceList{
		corev1.ResourceCPU: *resource.NewMilliQuantity(int64(runtime.NumCPU())*1000, resource.DecimalSI),
	}
	if memCapacity > 0 {
		out[corev1.ResourceMemory] = *resource.NewQuantity(memCapacity, resource.BinarySI)
	}
	if _, ok := res[ResourcePID]; ok {
		fs, err := procfs.NewDefaultFS()
		if err != nil {
			return nil, fmt.Errorf("reserved pid: %w", err)
		}
		max, err := fs.SysctlInts("kernel.pid_max")
		if err != nil {
			return nil, fmt.Errorf("reserved pid: %w", err)
		}
		if len(max) != 1 {
			return nil, fmt.Errorf("reserved pid: kernel.pid_max has %d values, want 1", len(max))
		}
		out[ResourcePID] = *resource.NewQuantity(int64(max[0]), resource.DecimalSI)
	}
	for name, q := range out {
		r, ok := res[name]
		if !ok {
			continue
		}
		q.Sub(r)
		if q.Sign() < 0 {
			q = resource.Quantity{}
		}
		out[name] = q
	}
	return out, nil
}
