package stats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkSummary is the cost of one scrape on our side (the CRI answers
// from memory here; a real runtime's own time comes on top): N pods of two
// running containers each, every pod with an emptyDir, an etc-hosts and
// log files on disk. The clock advances 15 s per scrape, metrics-server's
// period, so CPU rates are computed every time and volumes are walked
// again every fourth full scrape (the 1 min volume period).
func BenchmarkSummary(b *testing.B) {
	for _, n := range []int{10, 100} {
		for _, only := range []bool{true, false} {
			name := fmt.Sprintf("pods=%d/full", n)
			if only {
				name = fmt.Sprintf("pods=%d/only_cpu_and_memory", n)
			}
			b.Run(name, func(b *testing.B) {
				p, tick := benchProvider(b, n)
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					tick()
					s, err := p.Summary(ctx, only)
					if err != nil {
						b.Fatal(err)
					}
					if len(s.Pods) != n {
						b.Fatalf("%d pods", len(s.Pods))
					}
				}
			})
		}
	}
}

func benchProvider(b *testing.B, n int) (*Provider, func()) {
	b.Helper()
	h := newHostFixture(b, true)
	clk := clocktesting.NewFakePassiveClock(t0)
	data := b.TempDir()
	podsDir, logsDir := filepath.Join(data, "pods"), filepath.Join(data, "logs")
	rt := newFakeRuntime()
	img := &fakeImages{fs: []*runtimeapi.FilesystemUsage{{Timestamp: t0.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: data}, UsedBytes: u64(1)}}}
	write := func(path string, size int) {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var cpus []*runtimeapi.CpuUsage
	for i := range n {
		sb, uid := fmt.Sprintf("sb%d", i), fmt.Sprintf("uid-%d", i)
		rt.sandboxes = append(rt.sandboxes, sandbox(sb, fmt.Sprintf("pod-%d", i), "bench", uid, runtimeapi.PodSandboxState_SANDBOX_READY, t0))
		rt.info[sb] = map[string]string{"info": `{"pid":4242}`}
		st := &runtimeapi.PodSandboxStats{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: sb},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:    &runtimeapi.CpuUsage{Timestamp: t0.UnixNano(), UsageCoreNanoSeconds: u64(1e9)},
				Memory: &runtimeapi.MemoryUsage{Timestamp: t0.UnixNano(), WorkingSetBytes: u64(1 << 20), UsageBytes: u64(2 << 20)},
			},
		}
		cpus = append(cpus, st.Linux.Cpu)
		for j, name := range []string{"app", "sidecar"} {
			id := fmt.Sprintf("%s-c%d", sb, j)
			rt.containers = append(rt.containers, ctr(id, sb, name, 0, runtimeapi.ContainerState_CONTAINER_RUNNING, t0))
			cs := ctrStats(id, name, t0, 5e8, 1<<19, 1<<18, &runtimeapi.FilesystemUsage{Timestamp: t0.UnixNano(),
				FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: data}, UsedBytes: u64(4096), InodesUsed: u64(2)})
			st.Linux.Containers = append(st.Linux.Containers, cs)
			cpus = append(cpus, cs.Cpu)
			write(filepath.Join(logsDir, "bench_pod-"+fmt.Sprint(i)+"_"+uid, name, "0.log"), 4096)
		}
		rt.sbStats = append(rt.sbStats, st)
		write(filepath.Join(podsDir, uid, "volumes", pluginEmptyDir, "scratch", "f"), 64<<10)
		write(filepath.Join(podsDir, uid, etcHostsFile), 200)
	}
	h.write(h.proc, "4242/net/dev", netDev(map[string][4]uint64{"lo": {1, 0, 1, 0}, "eth0": {111, 0, 222, 0}}))
	p := New(rt, img, WithNodeName("bench"), WithRootDir(data), WithPodsDir(podsDir), WithPodLogsDir(logsDir),
		WithProcRoot(h.proc), WithCgroupRoot(h.cgroup), WithClock(clk), WithLogger(quietLogger()))
	var k uint64
	tick := func() {
		k++
		now := t0.Add(time.Duration(k) * 15 * time.Second)
		clk.SetTime(now)
		for _, c := range cpus {
			c.Timestamp = now.UnixNano()
			c.UsageCoreNanoSeconds.Value += 1e9
		}
		rt.mu.Lock()
		clear(rt.calls)
		rt.mu.Unlock()
	}
	return p, tick
}
