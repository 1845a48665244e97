package docker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCRIUsage(t *testing.T) {
	read := time.Unix(1_700_000_000, 123456789)
	const memTotal = 8 << 30
	tests := []struct {
		name             string
		stats            map[string]uint64
		limit            uint64
		ws, rss, pf, mpf uint64
		avail, swap      *uint64
	}{
		{
			name: "cgroup v1",
			stats: map[string]uint64{"rss": 1, "total_rss": 4096, "inactive_file": 1, "total_inactive_file": 1000,
				"pgfault": 1, "total_pgfault": 70, "pgmajfault": 1, "total_pgmajfault": 3, "total_swap": 512},
			limit: memTotal, // Docker's "no limit"
			ws:    9000, rss: 4096, pf: 70, mpf: 3, swap: ptrU(512),
		},
		{
			name:  "cgroup v2 with a limit",
			stats: map[string]uint64{"anon": 8192, "file": 2000, "inactive_file": 2000, "pgfault": 11, "pgmajfault": 2},
			limit: 9500,
			ws:    8000, rss: 8192, pf: 11, mpf: 2, avail: ptrU(1500),
		},
		{
			name:  "inactive pages above usage",
			stats: map[string]uint64{"inactive_file": 20000},
			limit: memTotal,
			ws:    0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &container.StatsResponse{Read: read, MemoryStats: container.MemoryStats{Usage: 10000, Limit: tc.limit, Stats: tc.stats}}
			s.CPUStats.CPUUsage.TotalUsage = 42
			cpu, mem, swap := criUsage(s, memTotal)
			if cpu.Timestamp != read.UnixNano() || mem.Timestamp != read.UnixNano() {
				t.Errorf("timestamps %d/%d, want Docker's read time %d", cpu.Timestamp, mem.Timestamp, read.UnixNano())
			}
			if cpu.UsageCoreNanoSeconds.GetValue() != 42 {
				t.Errorf("cpu = %v", cpu)
			}
			if mem.UsageBytes.GetValue() != 10000 || mem.WorkingSetBytes.GetValue() != tc.ws || mem.RssBytes.GetValue() != tc.rss ||
				mem.PageFaults.GetValue() != tc.pf || mem.MajorPageFaults.GetValue() != tc.mpf {
				t.Errorf("memory = %v", mem)
			}
			if !sameU(valueOrNil(mem.AvailableBytes), tc.avail) {
				t.Errorf("available = %v, want %v", mem.AvailableBytes, tc.avail)
			}
			var gotSwap *runtimeapi.UInt64Value
			if swap != nil {
				gotSwap = swap.SwapUsageBytes
				if swap.Timestamp != read.UnixNano() {
					t.Errorf("swap timestamp %d", swap.Timestamp)
				}
			}
			if !sameU(valueOrNil(gotSwap), tc.swap) {
				t.Errorf("swap = %v, want %v", gotSwap, tc.swap)
			}
		})
	}
	t.Run("no sample", func(t *testing.T) {
		// Docker's answer for a container that stopped: no read time.
		cpu, mem, swap := criUsage(&container.StatsResponse{ID: "x"}, memTotal)
		if cpu != nil || mem != nil || swap != nil {
			t.Errorf("got %v %v %v, want nothing", cpu, mem, swap)
		}
	})
}

func ptrU(v uint64) *uint64 { return &v }

func valueOrNil(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	return ptrU(v.Value)
}

func sameU(a, b *uint64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func TestSumPod(t *testing.T) {
	mk := func(ts int64, cpu, ws uint64) containerSample {
		return containerSample{pids: 2, stats: &runtimeapi.ContainerStats{
			Cpu:    &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}},
			Memory: &runtimeapi.MemoryUsage{Timestamp: ts, WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws}, UsageBytes: &runtimeapi.UInt64Value{Value: ws}, RssBytes: &runtimeapi.UInt64Value{Value: 1}},
		}}
	}
	exited := containerSample{stats: &runtimeapi.ContainerStats{}}
	pause := &cgroupSample{at: time.Unix(0, 50), cpuNanos: 5, workingSet: 7, usage: 7, rss: 3, pids: ptrU(1)}
	cpu, mem, proc := sumPod([]containerSample{mk(100, 10, 100), exited, mk(300, 20, 200)}, pause)
	if cpu.Timestamp != 300 || cpu.UsageCoreNanoSeconds.Value != 35 {
		t.Errorf("cpu = %v", cpu)
	}
	if mem.Timestamp != 300 || mem.WorkingSetBytes.Value != 307 || mem.UsageBytes.Value != 307 || mem.RssBytes.Value != 5 {
		t.Errorf("memory = %v", mem)
	}
	if proc.ProcessCount.Value != 5 {
		t.Errorf("processes = %v", proc)
	}
}

// writeFiles writes name -> content under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	pauseID = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	ctrID   = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	otherID = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
)

func TestCgroupV1(t *testing.T) {
	root := t.TempDir()
	proc, cg := filepath.Join(root, "proc"), filepath.Join(root, "cgroup")
	// cpu and cpuacct co-mounted as "cpu,cpuacct", as most distributions do.
	writeFiles(t, proc, map[string]string{"42/cgroup": "12:pids:/kubepods/pod1/" + pauseID + "\n" +
		"4:memory:/kubepods/pod1/" + pauseID + "\n3:cpu,cpuacct:/kubepods/pod1/" + pauseID + "\n1:name=systemd:/x\n0::/\n"})
	pod := "/kubepods/pod1"
	writeFiles(t, cg, map[string]string{
		"cpu,cpuacct" + pod + "/cpuacct.usage":                    "5000000000\n",
		"cpu,cpuacct" + pod + "/" + pauseID + "/cpuacct.usage":    "1000\n",
		"memory" + pod + "/memory.usage_in_bytes":                 "300000\n",
		"memory" + pod + "/memory.limit_in_bytes":                 "9223372036854771712\n",
		"memory" + pod + "/memory.stat":                           "cache 5\nrss 1\ntotal_rss 120000\ntotal_inactive_file 100000\ntotal_pgfault 900\ntotal_pgmajfault 9\nbogus\n",
		"memory" + pod + "/" + pauseID + "/memory.usage_in_bytes": "4096\n",
		"memory" + pod + "/" + pauseID + "/memory.limit_in_bytes": "1048576\n",
		"memory" + pod + "/" + pauseID + "/memory.stat":           "total_rss 4096\n",
		"memory" + pod + "/" + ctrID + "/memory.stat":             "total_rss 4096\n",
		"pids" + pod + "/pids.current":                            "7\n",
	})
	ref, err := cgroupOf(proc, cg, 42)
	if err != nil {
		t.Fatal(err)
	}
	if ref.v2 {
		t.Fatal("v1 hierarchies read as v2")
	}
	parent := ref.parent()
	if parent.isRoot() {
		t.Fatal("pod cgroup taken for the root")
	}
	if ok, err := parent.holdsOnly(map[string]bool{pauseID: true, ctrID: true}); err != nil || !ok {
		t.Errorf("holdsOnly(pod's containers) = %v, %v; want true", ok, err)
	}
	if ok, _ := parent.holdsOnly(map[string]bool{pauseID: true}); ok {
		t.Error("holdsOnly is true although another container's cgroup is there")
	}
	// A shared parent (a QoS class) holds other pods' cgroups.
	if ok, _ := parent.parent().holdsOnly(map[string]bool{pauseID: true, ctrID: true}); ok {
		t.Error("holdsOnly is true for a cgroup holding a pod's cgroup")
	}
	s, err := readCgroup(parent)
	if err != nil {
		t.Fatal(err)
	}
	if s.cpuNanos != 5e9 || s.usage != 300000 || s.workingSet != 200000 || s.rss != 120000 || s.pageFaults != 900 || s.majFaults != 9 ||
		s.limit != 0 || s.swap != nil || s.pids == nil || *s.pids != 7 || s.at.IsZero() {
		t.Errorf("pod cgroup = %+v", s)
	}
	m := criMemoryFromCgroup(s)
	if m.AvailableBytes != nil || m.WorkingSetBytes.Value != 200000 {
		t.Errorf("pod memory = %v", m)
	}
	own, err := readCgroup(ref)
	if err != nil {
		t.Fatal(err)
	}
	if own.cpuNanos != 1000 || own.usage != 4096 || own.limit != 1048576 || own.pids != nil {
		t.Errorf("pause cgroup = %+v", own)
	}
	if m := criMemoryFromCgroup(own); m.AvailableBytes.GetValue() != 1048576-4096 {
		t.Errorf("pause memory = %v", m)
	}
}

func TestCgroupV2(t *testing.T) {
	root := t.TempDir()
	proc, cg := filepath.Join(root, "proc"), filepath.Join(root, "cgroup")
	pod := "/kubepods.slice/kubepods-pod1.slice"
	writeFiles(t, proc, map[string]string{"42/cgroup": "0::" + pod + "/docker-" + pauseID + ".scope\n"})
	writeFiles(t, cg, map[string]string{
		pod + "/cpu.stat":                                    "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n",
		pod + "/memory.current":                              "50000\n",
		pod + "/memory.max":                                  "max\n",
		pod + "/memory.stat":                                 "anon 30000\nfile 15000\ninactive_file 10000\npgfault 40\npgmajfault 1\n",
		pod + "/memory.swap.current":                         "128\n",
		pod + "/pids.current":                                "3\n",
		pod + "/docker-" + pauseID + ".scope/cpu.stat":       "usage_usec 1\n",
		pod + "/docker-" + otherID + ".scope/memory.current": "1\n",
	})
	ref, err := cgroupOf(proc, cg, 42)
	if err != nil {
		t.Fatal(err)
	}
	if !ref.v2 {
		t.Fatal("v2 hierarchy read as v1")
	}
	parent := ref.parent()
	if ok, _ := parent.holdsOnly(map[string]bool{pauseID: true}); ok {
		t.Error("holdsOnly is true although another container's cgroup is there")
	}
	if ok, _ := parent.holdsOnly(map[string]bool{pauseID: true, otherID: true}); !ok {
		t.Error("holdsOnly is false for the pod's own containers")
	}
	s, err := readCgroup(parent)
	if err != nil {
		t.Fatal(err)
	}
	if s.cpuNanos != 2_500_000 || s.usage != 50000 || s.workingSet != 40000 || s.rss != 30000 || s.pageFaults != 40 || s.majFaults != 1 ||
		s.limit != 0 || s.swap == nil || *s.swap != 128 || *s.pids != 3 {
		t.Errorf("pod cgroup = %+v", s)
	}
	c := criCPUFromCgroup(s)
	if c.Timestamp != s.at.UnixNano() || c.UsageCoreNanoSeconds.Value != 2_500_000 {
		t.Errorf("cpu = %v", c)
	}
}

func TestRootIsNoPodCgroup(t *testing.T) {
	pc, err := parseProcCgroup([]byte("4:memory:/" + pauseID + "\n2:cpuacct:/" + pauseID + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !(cgroupRef{pc: pc}).parent().isRoot() {
		t.Error("the parent of a top-level cgroup is not the root")
	}
}

func TestParseProcCgroupErrors(t *testing.T) {
	for _, in := range []string{"", "\n", "garbage", "1:cpu", "1:cpu:relative"} {
		if _, err := parseProcCgroup([]byte(in)); err == nil {
			t.Errorf("parseProcCgroup(%q) succeeded", in)
		}
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	f.Add([]byte("12:pids:/docker/x\n3:cpu,cpuacct:/docker/x\n0::/\n"))
	f.Add([]byte("0::/kubepods.slice/a.scope\n"))
	f.Add([]byte("1:name=systemd:/\n:::\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pc, err := parseProcCgroup(b)
		if err != nil {
			return
		}
		for c, p := range pc.v1 {
			if !strings.HasPrefix(p, "/") || c == "" {
				t.Fatalf("controller %q path %q", c, p)
			}
		}
		if pc.unified != "" && !strings.HasPrefix(pc.unified, "/") {
			t.Fatalf("unified path %q", pc.unified)
		}
	})
}

func FuzzParseFlatKeyed(f *testing.F) {
	f.Add([]byte("cache 1\nrss 2\ntotal_rss 3\n"))
	f.Add([]byte("usage_usec 18446744073709551615\nbad line here\n k 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for k := range parseFlatKeyed(b) {
			if k == "" || strings.ContainsAny(k, " \n") {
				t.Fatalf("key %q", k)
			}
		}
	})
}

func TestCountInodes(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a": "x", "sub/b": "y", "sub/deeper/c": "z"})
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub", "a-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(dir, "sym")); err != nil {
		t.Fatal(err)
	}
	// dir, sub, sub/deeper; a (and its link), b, c; sym.
	n, err := countInodes(dir)
	if err != nil || n != 7 {
		t.Errorf("countInodes = %d, %v; want 7", n, err)
	}
}
