package sources

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"

	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// PressureState is one reading of podsyncd's eviction manager.
type PressureState struct {
	// Err is set when podsyncd could not be asked.
	Err error
	// Synchronized is false until the eviction manager measured the node.
	Synchronized bool
	// Memory, Disk and PID say which pressure conditions hold.
	Memory, Disk, PID bool
	// Signals are the signals whose thresholds are met now.
	Signals []string
}

// PodSync is a cached client of podsyncd's GetNodePressure: podsyncd's
// eviction manager judges pressure, nodestatusd only reports it.
type PodSync struct {
	cachedPeer[podsyncv1.PodSyncServiceClient, PressureState]
}

// NewPodSync returns a podsyncd source; readings younger than maxAge are reused.
func NewPodSync(endpoint string, maxAge time.Duration) *PodSync {
	p := &PodSync{}
	p.cachedPeer = newCachedPeer("podsyncd", endpoint, podsyncv1.NewPodSyncServiceClient, maxAge, p.read,
		func(err error) PressureState { return PressureState{Err: err} })
	return p
}

func (p *PodSync) read(ctx context.Context, client podsyncv1.PodSyncServiceClient) PressureState {
	resp, err := client.GetNodePressure(ctx, &podsyncv1.GetNodePressureRequest{})
	if err != nil {
		return PressureState{Err: p.peer.wrap(err)}
	}
	return PressureState{Synchronized: resp.GetSynchronized(), Memory: resp.GetMemoryPressure(),
		Disk: resp.GetDiskPressure(), PID: resp.GetPidPressure(), Signals: resp.GetSignals()}
}

// DeviceResources is one reading of podsyncd's device manager: the
// extended resources device plugins advertise.
type DeviceResources struct {
	// Err is set when podsyncd could not be asked.
	Err error
	// Capacity counts every device of each resource, Allocatable the
	// healthy ones.
	Capacity, Allocatable map[corev1.ResourceName]int64
}

// Devices is a cached client of podsyncd's GetDeviceResources: device
// plugins register with podsyncd, nodestatusd reports their resources.
type Devices struct {
	cachedPeer[podsyncv1.PodSyncServiceClient, DeviceResources]
}

// NewDevices returns a device-resources source; readings younger than
// maxAge are reused.
func NewDevices(endpoint string, maxAge time.Duration) *Devices {
	d := &Devices{}
	d.cachedPeer = newCachedPeer("podsyncd", endpoint, podsyncv1.NewPodSyncServiceClient, maxAge, d.read,
		func(err error) DeviceResources { return DeviceResources{Err: err} })
	return d
}

func (d *Devices) read(ctx context.Context, client podsyncv1.PodSyncServiceClient) DeviceResources {
	resp, err := client.GetDeviceResources(ctx, &podsyncv1.GetDeviceResourcesRequest{})
	if err != nil {
		return DeviceResources{Err: d.peer.wrap(err)}
	}
	out := DeviceResources{Capacity: map[corev1.ResourceName]int64{}, Allocatable: map[corev1.ResourceName]int64{}}
	for _, r := range resp.GetResources() {
		out.Capacity[corev1.ResourceName(r.GetName())] = r.GetCapacity()
		out.Allocatable[corev1.ResourceName(r.GetName())] = r.GetAllocatable()
	}
	return out
}
