package stats

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// nodeProvider is a Provider over a host fixture and a CRI with no pods.
func nodeProvider(t *testing.T, h *hostFixture, clk *clocktesting.FakePassiveClock) (*Provider, *fakeRuntime, *fakeImages) {
	t.Helper()
	rt := newFakeRuntime()
	img := &fakeImages{fs: []*runtimeapi.FilesystemUsage{{
		Timestamp: t0.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: t.TempDir()},
		UsedBytes: u64(123456), InodesUsed: u64(78),
	}}}
	data := t.TempDir()
	p := New(rt, img, WithNodeName("node-a"), WithRootDir(data), WithProcRoot(h.proc), WithCgroupRoot(h.cgroup),
		WithPodLogsDir(filepath.Join(data, "logs")), WithClock(clk), WithLogger(quietLogger()))
	return p, rt, img
}

func TestNodeCPUAndMemory(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		v2                     bool
		usage, rss             uint64
		pgfault, pgmajfault    uint64
		cpuacctDir, removeStat string
	}{
		{name: "cgroup v1 cpuacct alone", usage: fixtureUsageV1, rss: 1_500_000_000, pgfault: 100, pgmajfault: 7},
		{name: "cgroup v1 cpu,cpuacct", usage: fixtureUsageV1, rss: 1_500_000_000, pgfault: 100, pgmajfault: 7, cpuacctDir: "cpu,cpuacct"},
		// The v2 root has no memory.current: usage is MemTotal - MemFree.
		{name: "cgroup v2", v2: true, usage: fixtureMemTotal - fixtureMemFree, rss: 1_500_000_000, pgfault: 100, pgmajfault: 7},
		// Without a root memory.stat, meminfo and vmstat stand in.
		{name: "cgroup v2 without root memory.stat", v2: true, usage: fixtureMemTotal - fixtureMemFree, rss: 1_200_000 * 1024,
			pgfault: 4242, pgmajfault: 42, removeStat: "memory.stat"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostFixture(t, tc.v2)
			if tc.cpuacctDir != "" {
				if err := os.Rename(filepath.Join(h.cgroup, "cpuacct"), filepath.Join(h.cgroup, tc.cpuacctDir)); err != nil {
					t.Fatal(err)
				}
			}
			inactive := uint64(fixtureInactive)
			if tc.removeStat != "" {
				if err := os.Remove(filepath.Join(h.cgroup, tc.removeStat)); err != nil {
					t.Fatal(err)
				}
				inactive = 900_000 * 1024 // Inactive(file) in meminfo
			}
			clk := clocktesting.NewFakePassiveClock(t0)
			p, _, _ := nodeProvider(t, h, clk)
			for _, only := range []bool{false, true} {
				s, err := p.Summary(context.Background(), only)
				if err != nil {
					t.Fatal(err)
				}
				n := s.Node
				if n.NodeName != "node-a" || !n.StartTime.Time.Equal(time.Unix(fixtureBoot, 0)) {
					t.Fatalf("name %q start %v", n.NodeName, n.StartTime)
				}
				if got := *n.CPU.UsageCoreNanoSeconds; got != 5_000_000_000 {
					t.Errorf("usageCoreNanoSeconds = %d", got)
				}
				if !n.CPU.Time.Time.Equal(t0) {
					t.Errorf("cpu time %v", n.CPU.Time)
				}
				m := n.Memory
				ws := tc.usage - inactive
				checkU64(t, "usageBytes", m.UsageBytes, tc.usage)
				checkU64(t, "workingSetBytes", m.WorkingSetBytes, ws)
				checkU64(t, "availableBytes", m.AvailableBytes, fixtureMemTotal-ws)
				checkU64(t, "rssBytes", m.RSSBytes, tc.rss)
				checkU64(t, "pageFaults", m.PageFaults, tc.pgfault)
				checkU64(t, "majorPageFaults", m.MajorPageFaults, tc.pgmajfault)
				checkU64(t, "swapUsageBytes", n.Swap.SwapUsageBytes, fixtureSwapUsed)
				checkU64(t, "swapAvailableBytes", n.Swap.SwapAvailableBytes, fixtureSwapFree)
				if n.CPU.PSI == nil || n.CPU.PSI.Some.Total != 12345 || n.CPU.PSI.Some.Avg10 != 1.5 {
					t.Errorf("cpu psi %+v", n.CPU.PSI)
				}
				if n.Memory.PSI == nil || n.Memory.PSI.Full.Total != 33 {
					t.Errorf("memory psi %+v", n.Memory.PSI)
				}
				if only {
					if n.Fs != nil || n.Network != nil || n.Runtime != nil || n.Rlimit != nil || n.IO != nil {
						t.Errorf("only_cpu_and_memory node has more: %+v", n)
					}
				} else if n.IO == nil || n.IO.PSI.Full.Total != 555 {
					t.Errorf("io %+v", n.IO)
				}
			}
		})
	}
}

func checkU64(t *testing.T, what string, got *uint64, want uint64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s unset, want %d", what, want)
		return
	}
	if *got != want {
		t.Errorf("%s = %d, want %d", what, *got, want)
	}
}

// TestNodeNanoCores checks usageNanoCores from two samples of the root
// cgroup with an injected clock: none on the first, the average since
// the kept sample on later ones, the kept rate for a sample too close to
// the last, and none again after the counter goes backwards.
func TestNodeNanoCores(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		h := newHostFixture(t, v2)
		clk := clocktesting.NewFakePassiveClock(t0)
		p, _, _ := nodeProvider(t, h, clk)
		steps := []struct {
			advance time.Duration
			cpu     uint64
			want    *uint64
		}{
			{0, 5_000_000_000, nil},
			{10 * time.Second, 10_000_000_000, ptr[uint64](500_000_000)},       // 5 s of CPU in 10 s
			{100 * time.Millisecond, 10_150_000_000, ptr[uint64](500_000_000)}, // too soon: the last rate
			{2 * time.Second, 14_000_000_000, ptr[uint64](2_000_000_000)},      // from the kept sample, 2.1 s ago
			{time.Second, 1_000_000_000, nil},                                  // reset
			{time.Second, 1_250_000_000, ptr[uint64](250_000_000)},
		}
		for i, st := range steps {
			clk.SetTime(clk.Now().Add(st.advance))
			h.setCPU(st.cpu)
			s, err := p.Summary(context.Background(), i%2 == 0)
			if err != nil {
				t.Fatal(err)
			}
			got := s.Node.CPU.UsageNanoCores
			switch {
			case st.want == nil && got != nil:
				t.Errorf("v2=%v step %d: nanocores %d, want none", v2, i, *got)
			case st.want != nil && got == nil:
				t.Errorf("v2=%v step %d: no nanocores, want %d", v2, i, *st.want)
			case st.want != nil && i == 3:
				// 4 s of CPU over 2.1 s, the window since the kept sample.
				if want := uint64(1_904_761_904); absDiff(*got, want) > 1 {
					t.Errorf("v2=%v step %d: nanocores %d, want %d", v2, i, *got, want)
				}
			case st.want != nil && *got != *st.want:
				t.Errorf("v2=%v step %d: nanocores %d, want %d", v2, i, *got, *st.want)
			}
		}
	}
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestNodeNetworkFsRlimitRuntime(t *testing.T) {
	h := newHostFixture(t, false)
	p, _, img := nodeProvider(t, h, clocktesting.NewFakePassiveClock(t0))
	s, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	n := s.Node

	// Network: PID 1's namespace, loopback and container links left out.
	if n.Network == nil {
		t.Fatal("no network")
	}
	var names []string
	for _, i := range n.Network.Interfaces {
		names = append(names, i.Name)
	}
	if len(names) != 2 || names[0] != "ens5" || names[1] != "eth0" {
		t.Errorf("interfaces %v, want [ens5 eth0]", names)
	}
	if n.Network.Name != "eth0" || *n.Network.RxBytes != 1000 || *n.Network.RxErrors != 1 || *n.Network.TxBytes != 2000 || *n.Network.TxErrors != 2 {
		t.Errorf("default interface %+v", n.Network.InterfaceStats)
	}
	// Without PID 1, our own namespace.
	if err := os.RemoveAll(filepath.Join(h.proc, "1")); err != nil {
		t.Fatal(err)
	}
	s2, err := p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if ifs := s2.Node.Network.Interfaces; len(ifs) != 1 || ifs[0].Name != "eth9" || s2.Node.Network.Name != "" {
		t.Errorf("fallback interfaces %+v", s2.Node.Network)
	}

	// Fs: the root dir's filesystem.
	var st unix.Statfs_t
	if err := unix.Statfs(p.rootDir, &st); err != nil {
		t.Fatal(err)
	}
	checkU64(t, "fs capacity", n.Fs.CapacityBytes, st.Blocks*uint64(st.Bsize))
	checkU64(t, "fs inodes", n.Fs.Inodes, st.Files)
	if *n.Fs.AvailableBytes > *n.Fs.CapacityBytes || *n.Fs.UsedBytes == 0 || *n.Fs.UsedBytes > *n.Fs.CapacityBytes ||
		*n.Fs.InodesUsed+*n.Fs.InodesFree != *n.Fs.Inodes {
		t.Errorf("fs %+v", n.Fs)
	}

	// Rlimit: the smaller of pid_max and threads-max; tasks from loadavg.
	if n.Rlimit == nil || *n.Rlimit.MaxPID != 63000 || *n.Rlimit.NumOfRunningProcesses != 412 {
		t.Errorf("rlimit %+v", n.Rlimit)
	}

	// Runtime: image fs usage from the CRI, capacity from its mount point.
	rfs := n.Runtime.ImageFs
	mp := img.fs[0].FsId.Mountpoint
	if err := unix.Statfs(mp, &st); err != nil {
		t.Fatal(err)
	}
	if *rfs.UsedBytes != 123456 || *rfs.InodesUsed != 78 || *rfs.CapacityBytes != st.Blocks*uint64(st.Bsize) || !rfs.Time.Time.Equal(t0) {
		t.Errorf("imageFs %+v", rfs)
	}
	if cfs := n.Runtime.ContainerFs; cfs == nil || *cfs.UsedBytes != *rfs.UsedBytes {
		t.Errorf("containerFs %+v", cfs)
	}
	if len(s.Pods) != 0 || s.Pods == nil {
		t.Errorf("pods %v, want empty", s.Pods)
	}
}

func TestNodeErrors(t *testing.T) {
	t.Run("no root cgroup", func(t *testing.T) {
		h := newHostFixture(t, false)
		if err := os.RemoveAll(filepath.Join(h.cgroup, "cpuacct")); err != nil {
			t.Fatal(err)
		}
		p, _, _ := nodeProvider(t, h, clocktesting.NewFakePassiveClock(t0))
		if _, err := p.Summary(context.Background(), true); err == nil {
			t.Fatal("summary without cpuacct succeeded")
		}
	})
	t.Run("image fs unavailable", func(t *testing.T) {
		h := newHostFixture(t, true)
		p, _, img := nodeProvider(t, h, clocktesting.NewFakePassiveClock(t0))
		img.fs = nil
		if _, err := p.Summary(context.Background(), false); err == nil {
			t.Fatal("full summary without an image fs succeeded")
		}
		// CPU and memory do not need it.
		if _, err := p.Summary(context.Background(), true); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing optional files", func(t *testing.T) {
		h := newHostFixture(t, true)
		for _, f := range []string{"pressure", "loadavg", "sys", "1", "net", "stat"} {
			if err := os.RemoveAll(filepath.Join(h.proc, f)); err != nil {
				t.Fatal(err)
			}
		}
		p, _, _ := nodeProvider(t, h, clocktesting.NewFakePassiveClock(t0))
		s, err := p.Summary(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		n := s.Node
		if n.CPU.PSI != nil || n.IO != nil || n.Network != nil || n.Rlimit.MaxPID != nil || n.Rlimit.NumOfRunningProcesses != nil ||
			!n.StartTime.IsZero() {
			t.Errorf("node %+v", n)
		}
	})
}
