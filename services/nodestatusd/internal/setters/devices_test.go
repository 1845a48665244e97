package setters

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/nodestatusd/internal/host"
	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
)

// TestMachineInfoDeviceResources: the device plugins' resources show in
// capacity (every device) and allocatable (the healthy ones), a failed
// podsyncd read leaves the last answer in place instead of allocatable
// jumping back to capacity, an ended plugin shows capacity with
// allocatable 0, and the shared machine lists are never changed.
func TestMachineInfoDeviceResources(t *testing.T) {
	gpu := corev1.ResourceName("example.com/gpu")
	answers := []sources.DeviceResources{
		{Capacity: map[corev1.ResourceName]int64{gpu: 2}, Allocatable: map[corev1.ResourceName]int64{gpu: 1}},
		{Err: errors.New("podsyncd: connection refused")},
		{Capacity: map[corev1.ResourceName]int64{gpu: 2}, Allocatable: map[corev1.ResourceName]int64{gpu: 0}},
	}
	want := [][2]string{{"2", "1"}, {"2", "1"}, {"2", "0"}}
	i := 0
	in := &Inputs{
		Facts:   host.Facts{NumCPU: 2, MemoryBytes: 4 << 30},
		MaxPods: 110,
		Stats:   func() (host.Stats, error) { return host.Stats{Fs: host.FsStats{Capacity: 100 << 30}}, nil },
		Machine: &MachineCache{},
		Devices: NewDevices(func(context.Context) sources.DeviceResources { return answers[i] }),
	}
	set := MachineInfo(in)
	node := &corev1.Node{}
	for ; i < len(answers); i++ {
		if err := set(context.Background(), node); err != nil {
			t.Fatal(err)
		}
		c, a := node.Status.Capacity[gpu], node.Status.Allocatable[gpu]
		if c.String() != want[i][0] || a.String() != want[i][1] {
			t.Errorf("answer %d: capacity %s allocatable %s, want %s and %s", i, c.String(), a.String(), want[i][0], want[i][1])
		}
		if cpu := node.Status.Capacity[corev1.ResourceCPU]; cpu.String() != "2" {
			t.Errorf("answer %d: cpu capacity %s, want 2", i, cpu.String())
		}
	}
	if c, _, ok := in.Machine.get(100 << 30); !ok {
		t.Fatal("machine lists not cached")
	} else if _, leaked := c[gpu]; leaked {
		t.Error("a device resource leaked into the shared machine lists")
	}
}
