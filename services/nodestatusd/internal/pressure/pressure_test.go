package pressure

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/services/nodestatusd/internal/host"
)

func TestParseThresholds(t *testing.T) {
	ts, err := ParseThresholds(DefaultEvictionHard)
	if err != nil {
		t.Fatal(err)
	}
	mem, ok := Find(ts, MemoryAvailable)
	if !ok || mem.Value(0) != 100<<20 {
		t.Fatalf("memory threshold = %+v", mem)
	}
	fs, _ := Find(ts, NodeFsAvailable)
	if got := fs.Value(1000); got != 100 {
		t.Fatalf("nodefs 10%% of 1000 = %d", got)
	}
	for _, bad := range []map[string]string{
		{"memory.avail": "1Mi"},
		{MemoryAvailable: "lots"},
		{NodeFsAvailable: "120%"},
		{MemoryAvailable: "-1Mi"},
	} {
		if _, err := ParseThresholds(bad); err == nil {
			t.Errorf("ParseThresholds(%v) accepted", bad)
		}
	}
}

func TestMonitorHoldsForTransitionPeriod(t *testing.T) {
	ts, err := ParseThresholds(map[string]string{MemoryAvailable: "100Mi", NodeFsAvailable: "10%", PIDAvailable: "10%"})
	if err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	m := NewMonitor(ts, 5*time.Minute, clk)
	healthy := host.Stats{
		MemoryCapacity: 8 << 30, MemoryAvailable: 4 << 30,
		Fs:     host.FsStats{Capacity: 1000, Available: 500, Inodes: 100, InodeFree: 50},
		PIDMax: 1000, PIDs: 100,
	}
	if c := m.Observe(healthy); c != (Conditions{}) {
		t.Fatalf("healthy host under pressure: %+v", c)
	}
	low := healthy
	low.MemoryAvailable = 50 << 20
	low.Fs.Available = 50
	low.PIDs = 950
	if c := m.Observe(low); c != (Conditions{Memory: true, Disk: true, PID: true}) {
		t.Fatalf("starved host: %+v", c)
	}
	clk.Step(4 * time.Minute)
	if c := m.Observe(healthy); c != (Conditions{Memory: true, Disk: true, PID: true}) {
		t.Fatalf("conditions dropped inside the transition period: %+v", c)
	}
	clk.Step(2 * time.Minute)
	if c := m.Observe(healthy); c != (Conditions{}) {
		t.Fatalf("conditions held after the transition period: %+v", c)
	}
}
