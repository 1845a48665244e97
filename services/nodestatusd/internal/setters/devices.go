package setters

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
)

// Devices puts the extended resources of podsyncd's device plugins into the
// Node's capacity and allocatable: capacity counts every device a plugin
// listed, allocatable the healthy ones, so a plugin whose stream ended shows
// its capacity with allocatable 0, as the kubelet reports it. While podsyncd
// does not answer, its last answer stands: allocatable must not jump back to
// capacity because podsyncd is restarting.
type Devices struct {
	read func(ctx context.Context) sources.DeviceResources

	mu   sync.Mutex
	last sources.DeviceResources
}

// NewDevices returns Devices reading podsyncd through read.
func NewDevices(read func(ctx context.Context) sources.DeviceResources) *Devices {
	return &Devices{read: read}
}

// get returns the latest answer, or the last good one when podsyncd fails.
func (d *Devices) get(ctx context.Context) sources.DeviceResources {
	st := d.read(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	if st.Err == nil {
		d.last = st
	}
	return d.last
}

// overlay returns capacity and allocatable with the device resources set,
// copying the lists when it changes them (they may be shared). A nil
// Devices returns them as they are.
func (d *Devices) overlay(ctx context.Context, capacity, allocatable corev1.ResourceList) (corev1.ResourceList, corev1.ResourceList) {
	if d == nil {
		return capacity, allocatable
	}
	st := d.get(ctx)
	if len(st.Capacity) == 0 {
		return capacity, allocatable
	}
	c, a := capacity.DeepCopy(), allocatable.DeepCopy()
	for name, n := range st.Capacity {
		c[name] = *resource.NewQuantity(n, resource.DecimalSI)
		a[name] = *resource.NewQuantity(st.Allocatable[name], resource.DecimalSI)
	}
	return c, a
}
