package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/procinfo"
	"github.com/microlet/microlet/internal/testenv"
)

// BenchmarkHousekeeping measures what a node costs in steady state with 110
// pods (the kubelet's default maxPods): podsyncd's periodic work — PLEG
// relist every second, container GC every minute, image GC, container log
// rotation, pod cgroups, probes and status checks — and the CRI calls it
// makes, against the kubelet's budget in the upstream node e2e resource
// tracking (kubelet_perf: 0.35 core and 300 MiB for 100 pods). The pods
// each run one container that only waits (no forks), so the node is idle
// apart from microlet itself.
//
// Each of the b.N iterations is one window (MICROLET_BENCH_WINDOW, default
// 3m, long enough for container GC to run three times); it reports per
// window podsyncd's CPU in cores and per minute, its RSS and PSS (peak of
// samples every 5 s), the same for runtime-shim and for the whole stack,
// and the CRI calls per minute by method as runtime-shim served them (every
// client: podsyncd makes nearly all, nodestatusd and nodeapi a few).
// A benchmark, so never part of `make test`; run it with
//
//	flock /tmp/microlet-bench.lock go test -run '^$' -bench Housekeeping -benchtime 1x -timeout 60m ./services/podsyncd/e2e/
//
// MICROLET_BENCH_PODS=30 picks another pod count. The numbers and the
// kubelet's budget beside them are in docs/podsyncd.md.
func BenchmarkHousekeeping(b *testing.B) {
	pods := 110
	if env := os.Getenv("MICROLET_BENCH_PODS"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n <= 0 {
			b.Fatalf("MICROLET_BENCH_PODS=%q: want one positive count", env)
		}
		pods = n
	}
	window := 3 * time.Minute
	if env := os.Getenv("MICROLET_BENCH_WINDOW"); env != "" {
		d, err := time.ParseDuration(env)
		if err != nil || d < 10*time.Second {
			b.Fatalf("MICROLET_BENCH_WINDOW=%q: want a duration of at least 10s", env)
		}
		window = d
	}
	metricsAddr := freeLoopbackAddr(b)
	s := startStackArgs(b, map[string][]string{components.RuntimeShim: {"--metrics-addr=" + metricsAddr}})
	s.runPods(b, pods)
	pids := s.servicePIDs()
	b.Logf("%d pods running; settling 30s", pods)
	time.Sleep(30 * time.Second) // let start-up work (first GC runs, statuses) finish before measuring

	b.ResetTimer()
	var sum housekeepingResult
	for i := 0; i < b.N; i++ {
		r := measureWindow(b, pids, metricsAddr, window)
		sum.add(r)
	}
	b.StopTimer()
	sum.scale(1 / float64(b.N))
	b.ReportMetric(sum.cores[components.PodSyncd], "podsyncd-cores")
	b.ReportMetric(sum.cores[components.PodSyncd]*60, "podsyncd-cpu-s/min")
	b.ReportMetric(sum.rss[components.PodSyncd], "podsyncd-rss-MiB")
	b.ReportMetric(sum.pss[components.PodSyncd], "podsyncd-pss-MiB")
	b.ReportMetric(sum.cores[components.RuntimeShim], "shim-cores")
	b.ReportMetric(sum.pss[components.RuntimeShim], "shim-pss-MiB")
	b.ReportMetric(sum.cores["total"], "stack-cores")
	b.ReportMetric(sum.pss["total"], "stack-pss-MiB")
	var total float64
	methods := make([]string, 0, len(sum.calls))
	for m, v := range sum.calls {
		methods = append(methods, m)
		total += v
	}
	sort.Slice(methods, func(i, j int) bool { return sum.calls[methods[i]] > sum.calls[methods[j]] })
	b.ReportMetric(total, "cri-calls/min")
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "%d pods, %s window x %d\n%-14s %8s %10s %10s\n", pods, window, b.N, "process", "cores", "RSS MiB", "PSS MiB")
	for _, name := range append(componentNames(), "microlet", "total") {
		fmt.Fprintf(&tbl, "%-14s %8.3f %10.1f %10.1f\n", name, sum.cores[name], sum.rss[name], sum.pss[name])
	}
	fmt.Fprintf(&tbl, "CRI calls/min by method (all clients), total %.0f\n", total)
	for _, m := range methods {
		fmt.Fprintf(&tbl, "  %-28s %8.1f\n", m, sum.calls[m])
	}
	// Printed, not logged: the testing package cuts a benchmark's log short.
	fmt.Print(tbl.String())
}

// housekeepingResult is one window: per process (and "total") cores, RSS
// and PSS in MiB (peak of the samples), and CRI calls per minute by method.
type housekeepingResult struct {
	cores, rss, pss map[string]float64
	calls           map[string]float64
}

func (h *housekeepingResult) add(r housekeepingResult) {
	for _, p := range []struct {
		dst *map[string]float64
		src map[string]float64
	}{
		{&h.cores, r.cores}, {&h.rss, r.rss}, {&h.pss, r.pss}, {&h.calls, r.calls}} {
		if *p.dst == nil {
			*p.dst = map[string]float64{}
		}
		for k, v := range p.src {
			(*p.dst)[k] += v
		}
	}
}

func (h *housekeepingResult) scale(f float64) {
	for _, m := range []map[string]float64{h.cores, h.rss, h.pss, h.calls} {
		for k := range m {
			m[k] *= f
		}
	}
}

// measureWindow measures one window of the given length.
func measureWindow(b *testing.B, pids map[string]int, metricsAddr string, window time.Duration) housekeepingResult {
	r := housekeepingResult{cores: map[string]float64{}, rss: map[string]float64{}, pss: map[string]float64{}}
	calls0 := criCalls(b, metricsAddr)
	cpu0 := cpuSeconds(pids)
	start := time.Now()
	sample := func() {
		var rss, pss float64
		for name, pid := range pids {
			u, err := procinfo.Of(pid)
			if err != nil {
				b.Fatalf("%s (pid %d) gone while measuring: %v", name, pid, err)
			}
			r.rss[name] = max(r.rss[name], float64(u.RSS)/(1<<20))
			r.pss[name] = max(r.pss[name], float64(u.PSS)/(1<<20))
			rss += float64(u.RSS) / (1 << 20)
			pss += float64(u.PSS) / (1 << 20)
		}
		r.rss["total"], r.pss["total"] = max(r.rss["total"], rss), max(r.pss["total"], pss)
	}
	for end := start.Add(window); time.Now().Before(end); {
		sample()
		time.Sleep(min(5*time.Second, time.Until(end)))
	}
	sample()
	secs := time.Since(start).Seconds()
	cpu := cpuSeconds(pids)
	for name, v := range cpu {
		r.cores[name] = (v - cpu0[name]) / secs
	}
	calls := criCalls(b, metricsAddr)
	r.calls = map[string]float64{}
	for m, v := range calls {
		if d := v - calls0[m]; d > 0 {
			r.calls[m] = d * 60 / secs
		}
	}
	return r
}

// runPods creates n pods on the node whose one container waits without
// forking and ends at once on SIGTERM, and waits until all are Running.
func (s *stack) runPods(b *testing.B, n int) {
	ctx := context.Background()
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			p := s.Pod(fmt.Sprintf("hk-%d", i), corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 2147483647 & wait")
			if _, err := s.admin.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	s.Eventually(fmt.Sprintf("%d pods Running", n), 20*time.Minute, func() (bool, string) {
		list, err := s.admin.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + s.node})
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running >= n, fmt.Sprintf("%d of %d Running", running, n)
	})
}

// criCalls is runtime-shim's grpc_server_handled_total summed by method.
func criCalls(b *testing.B, addr string) map[string]float64 {
	m, err := testenv.ScrapeMetrics(context.Background(), "http://"+addr+"/metrics")
	if err != nil {
		b.Fatalf("runtime-shim metrics: %v", err)
	}
	out := map[string]float64{}
	for _, series := range m["grpc_server_handled_total"].GetMetric() {
		var svc, method string
		for _, l := range series.GetLabel() {
			switch l.GetName() {
			case "grpc_service":
				svc = l.GetValue()
			case "grpc_method":
				method = l.GetValue()
			}
		}
		if strings.HasPrefix(svc, "runtime.v1.") {
			out[method] += series.GetCounter().GetValue()
		}
	}
	return out
}

func componentNames() []string {
	out := make([]string, len(components.All))
	for i, c := range components.All {
		out[i] = c.Name
	}
	return out
}

// freeLoopbackAddr is a 127.0.0.1 port free right now.
func freeLoopbackAddr(b *testing.B) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}
