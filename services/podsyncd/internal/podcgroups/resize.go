package podcgroups

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/resources"
)

// ResizePod moves the pod cgroup's limits during an in-place resize from
// what from's containers have to what to's get, as the kubelet's
// doPodResizeAction keeps a pod cgroup at least as large as its containers:
// with grow, before any container changes, every limit becomes the larger of
// the two (so a container may grow into it); without, after they all
// changed, the limits become to's. A pod without a cgroup is left alone.
func (m *Manager) ResizePod(from, to *corev1.Pod, grow bool) error {
	n := m.name(to)
	if !m.exists(n) {
		return nil
	}
	want := ForPod(to, !m.cfg.NoCPULimits, resources.QuotaPeriod)
	if grow {
		want = larger(ForPod(from, !m.cfg.NoCPULimits, resources.QuotaPeriod), want)
	}
	if err := m.update(n, want); err != nil {
		return fmt.Errorf("resize pod cgroup: %w", err)
	}
	return nil
}

// larger is the field-wise larger of a and b; an unset field (nil) or a
// quota of -1 is unlimited, so it wins. Pids are left as they are.
func larger(a, b Resources) Resources {
	var out Resources
	switch {
	case a.CPUShares == nil:
		out.CPUShares = b.CPUShares
	case b.CPUShares == nil || *a.CPUShares > *b.CPUShares:
		out.CPUShares = a.CPUShares
	default:
		out.CPUShares = b.CPUShares
	}
	switch {
	case a.CPUQuota == nil || b.CPUQuota == nil:
		// One side has no CPU limit on the pod: leave the quota alone.
	case *a.CPUQuota == -1 || *b.CPUQuota == -1:
		q := int64(-1)
		out.CPUQuota = &q
	case *a.CPUQuota > *b.CPUQuota:
		out.CPUQuota = a.CPUQuota
	default:
		out.CPUQuota = b.CPUQuota
	}
	if out.CPUQuota != nil {
		out.CPUPeriod = b.CPUPeriod
	}
	if a.Memory != nil && b.Memory != nil {
		out.Memory = b.Memory
		if *a.Memory > *b.Memory {
			out.Memory = a.Memory
		}
	}
	return out
}
