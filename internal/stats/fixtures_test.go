package stats

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hostFixture is a fake /proc and cgroup tree in a temp dir.
type hostFixture struct {
	t      testing.TB
	proc   string
	cgroup string
	v2     bool
}

const (
	fixtureBoot     = 1_700_000_000
	fixtureMemTotal = 8_000_000 * 1024 // MemTotal 8000000 kB
	fixtureMemFree  = 2_000_000 * 1024
	fixtureSwapUsed = 100_000 * 1024
	fixtureSwapFree = 900_000 * 1024
	fixtureInactive = 1_000_000_000 // inactive file pages in the cgroup
	fixtureUsageV1  = 3_000_000_000
)

func newHostFixture(t testing.TB, v2 bool) *hostFixture {
	t.Helper()
	root := t.TempDir()
	h := &hostFixture{t: t, proc: filepath.Join(root, "proc"), cgroup: filepath.Join(root, "cgroup"), v2: v2}
	h.write(h.proc, "meminfo", `MemTotal:        8000000 kB
MemFree:         2000000 kB
MemAvailable:    5000000 kB
Inactive(file):   900000 kB
AnonPages:       1200000 kB
SwapTotal:       1000000 kB
SwapFree:         900000 kB
`)
	h.write(h.proc, "stat", fmt.Sprintf("cpu  10 0 10 100 0 0 0 0 0 0\nbtime %d\nprocesses 99\n", fixtureBoot))
	h.write(h.proc, "1/net/dev", netDev(map[string][4]uint64{
		"lo": {1, 0, 1, 0}, "eth0": {1000, 1, 2000, 2}, "ens5": {30, 0, 40, 0},
		"veth1234": {5, 0, 6, 0}, "docker0": {7, 0, 8, 0},
	}))
	h.write(h.proc, "net/dev", netDev(map[string][4]uint64{"lo": {1, 0, 1, 0}, "eth9": {9, 0, 9, 0}}))
	h.write(h.proc, "loadavg", "0.50 0.40 0.30 3/412 9876\n")
	h.write(h.proc, "sys/kernel/pid_max", "4194304\n")
	h.write(h.proc, "sys/kernel/threads-max", "63000\n")
	h.write(h.proc, "pressure/cpu", "some avg10=1.50 avg60=1.00 avg300=0.50 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
	h.write(h.proc, "pressure/memory", "some avg10=0.10 avg60=0.00 avg300=0.00 total=77\nfull avg10=0.05 avg60=0.00 avg300=0.00 total=33\n")
	h.write(h.proc, "pressure/io", "some avg10=2.00 avg60=1.00 avg300=0.00 total=999\nfull avg10=1.00 avg60=0.50 avg300=0.00 total=555\n")
	h.write(h.proc, "vmstat", "nr_free_pages 100\npgfault 4242\npgmajfault 42\n")
	if v2 {
		h.write(h.cgroup, "cgroup.controllers", "cpuset cpu io memory pids\n")
		h.setCPU(5_000_000_000)
		h.write(h.cgroup, "memory.stat", fmt.Sprintf("anon 1500000000\nfile 2000000000\ninactive_file %d\nactive_file 5\npgfault 100\npgmajfault 7\nweird line here\n", fixtureInactive))
	} else {
		h.setCPU(5_000_000_000)
		h.write(h.cgroup, "memory/memory.usage_in_bytes", fmt.Sprintf("%d\n", fixtureUsageV1))
		h.write(h.cgroup, "memory/memory.stat", fmt.Sprintf(`cache 1
rss 2
inactive_file 3
pgfault 4
pgmajfault 5
total_cache 2000000000
total_rss 1500000000
total_inactive_file %d
total_pgfault 100
total_pgmajfault 7
`, fixtureInactive))
	}
	return h
}

// setCPU sets the root cgroup's cumulative CPU time in nanoseconds.
func (h *hostFixture) setCPU(ns uint64) {
	if h.v2 {
		h.write(h.cgroup, "cpu.stat", fmt.Sprintf("usage_usec %d\nuser_usec 1\nsystem_usec 2\n", ns/1000))
		return
	}
	h.write(h.cgroup, "cpuacct/cpuacct.usage", fmt.Sprintf("%d\n", ns))
}

func (h *hostFixture) write(root, rel, content string) {
	h.t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// netDev renders a /proc/net/dev with rx bytes, rx errs, tx bytes, tx errs.
func netDev(ifs map[string][4]uint64) string {
	s := "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	for name, v := range ifs {
		s += fmt.Sprintf("%6s: %d 10 %d 0 0 0 0 0 %d 20 %d 0 0 0 0 0\n", name, v[0], v[1], v[2], v[3])
	}
	return s
}

// fakeRuntime is the part of a CRI runtime the Provider calls. cri-api's
// own fake pulls testify into the module, which this does not need.
type fakeRuntime struct {
	criapi.RuntimeService // nil: any other method panics

	mu         sync.Mutex
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	sbStats    []*runtimeapi.PodSandboxStats
	ctrStats   []*runtimeapi.ContainerStats
	info       map[string]map[string]string // verbose status info by sandbox
	errs       map[string]error             // by method name
	calls      map[string]int
	// statsGate, when set, holds ListPodSandboxStats until it is closed.
	statsGate chan struct{}
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{info: map[string]map[string]string{}, errs: map[string]error{}, calls: map[string]int{}}
}

// call counts a call and answers like a CRI client: the context's error
// first, then any injected one.
func (f *fakeRuntime) call(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[name]++
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return f.errs[name]
}

func (f *fakeRuntime) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeRuntime) setErr(name string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[name] = err
}

func (f *fakeRuntime) ListPodSandbox(ctx context.Context, _ *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	if err := f.call(ctx, "ListPodSandbox"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*runtimeapi.PodSandbox(nil), f.sandboxes...), nil
}

func (f *fakeRuntime) ListContainers(ctx context.Context, _ *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	if err := f.call(ctx, "ListContainers"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*runtimeapi.Container(nil), f.containers...), nil
}

func (f *fakeRuntime) ListPodSandboxStats(ctx context.Context, _ *runtimeapi.PodSandboxStatsFilter) ([]*runtimeapi.PodSandboxStats, error) {
	if err := f.call(ctx, "ListPodSandboxStats"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	gate := f.statsGate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*runtimeapi.PodSandboxStats(nil), f.sbStats...), nil
}

func (f *fakeRuntime) ListContainerStats(ctx context.Context, _ *runtimeapi.ContainerStatsFilter) ([]*runtimeapi.ContainerStats, error) {
	if err := f.call(ctx, "ListContainerStats"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*runtimeapi.ContainerStats(nil), f.ctrStats...), nil
}

func (f *fakeRuntime) PodSandboxStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.PodSandboxStatusResponse, error) {
	if err := f.call(ctx, "PodSandboxStatus"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: id}}
	if verbose {
		resp.Info = f.info[id]
	}
	return resp, nil
}

// fakeImages answers ImageFsInfo.
type fakeImages struct {
	criapi.ImageManagerService
	mu  sync.Mutex
	fs  []*runtimeapi.FilesystemUsage
	err error
}

func (f *fakeImages) ImageFsInfo(context.Context) (*runtimeapi.ImageFsInfoResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: f.fs, ContainerFilesystems: f.fs}, nil
}

func u64(v uint64) *runtimeapi.UInt64Value { return &runtimeapi.UInt64Value{Value: v} }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// parseMetrics parses a Prometheus text exposition.
func parseMetrics(t testing.TB, r io.Reader) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return mf
}

// sample finds the metric of family name with exactly the given labels.
func sample(mf map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	f, ok := mf[name]
	if !ok {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		return m
	}
	return nil
}

// metricValue is the value of a counter or gauge sample.
func metricValue(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}
