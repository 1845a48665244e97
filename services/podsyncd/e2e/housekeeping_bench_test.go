package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

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
// kubelet's budget beside them are in docs/podsyncd.md. Measuring starts
// once podsyncd's counters show a container GC pass and a resync of every
// pod after all ran. The pods (label microlet-bench=housekeeping) and their
// containers are removed when the benchmark ends, also when it fails; it
// fails rather than run into -timeout's last 5 minutes, which the removal
// keeps for itself.
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
	metricsAddr, podsyncdMetrics := freeLoopbackAddr(b), freeLoopbackAddr(b)
	s := startStackArgs(b, map[string][]string{
		components.RuntimeShim: {"--metrics-addr=" + metricsAddr},
		components.PodSyncd:    {"--metrics-addr=" + podsyncdMetrics},
	})
	s.runPods(b, pods)
	pids := s.servicePIDs()
	// Start-up work is done once, after every pod ran, container GC has
	// made a pass and the pods have been synced again (a resync each).
	b.Logf("%d pods running; settling until a container GC pass and %d more pod worker passes", pods, pods)
	c0 := scrapeCounters(b, podsyncdMetrics)
	s.Eventually("a container GC pass and a resync of every pod", min(3*time.Minute, benchTimeLeft(b)), func() (bool, string) {
		d := scrapeCounters(b, podsyncdMetrics).sub(c0)
		return d.gcPasses >= 1 && d.syncs >= float64(pods), fmt.Sprintf("%v GC passes, %v pod worker passes", d.gcPasses, d.syncs)
	})

	b.ResetTimer()
	var sum housekeepingResult
	for i := 0; i < b.N; i++ {
		if left := benchTimeLeft(b); left < window {
			b.Fatalf("window %d of %d would end past -timeout (%s left before cleanup); stopping so the pods are removed", i+1, b.N, left)
		}
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

// housekeepingLabel marks BenchmarkHousekeeping's pods (and, through the
// runtime's pod UID label, their containers) for its cleanup.
const housekeepingLabel = "microlet-bench"

// benchCleanupMargin is the part of -timeout kept for removing the pods.
const benchCleanupMargin = 5 * time.Minute

// binaryStart is (about) when the test binary started; -timeout counts
// from a little later, so deadlines derived from it err early.
var binaryStart = time.Now()

// benchTimeLeft is how long the benchmark may still wait and measure: what
// is left of -timeout less benchCleanupMargin, so a slow run stops with a
// failure and its cleanup still runs instead of being cut off by the
// timeout's panic. Without -timeout, an hour.
func benchTimeLeft(b *testing.B) time.Duration {
	b.Helper()
	f := flag.Lookup("test.timeout")
	if f == nil {
		return time.Hour
	}
	d, err := time.ParseDuration(f.Value.String())
	if err != nil || d <= 0 {
		return time.Hour
	}
	left := time.Until(binaryStart.Add(d)) - benchCleanupMargin
	if left <= 0 {
		b.Fatalf("-timeout %s leaves no time before the %s kept for cleanup", d, benchCleanupMargin)
	}
	return left
}

// runPods creates n pods on the node whose one container waits without
// forking and ends at once on SIGTERM, and waits until all are Running.
// They are removed when the benchmark ends, however it ends.
func (s *stack) runPods(b *testing.B, n int) {
	ctx := context.Background()
	b.Cleanup(func() { s.removePods(b, housekeepingLabel+"=housekeeping") })
	sem := make(chan struct{}, 10)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			p := s.Pod(fmt.Sprintf("hk-%d", i), corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 2147483647 & wait")
			p.Labels = map[string]string{housekeepingLabel: "housekeeping"}
			if _, err := s.admin.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				b.Error(err)
			}
		}(i)
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	s.Eventually(fmt.Sprintf("%d pods Running", n), min(20*time.Minute, benchTimeLeft(b)), func() (bool, string) {
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

// removePods deletes the pods matching selector and then their containers:
// first through the API server while the node still runs (podsyncd stops
// them; up to a minute), then whatever is left, stopped or not, straight
// from Docker by the pods' UIDs. It runs as a cleanup, so it uses a context of its own
// and logs instead of failing: a pod left restarting on Docker 20.10 has
// deadlocked the daemon for every later test.
func (s *stack) removePods(b *testing.B, selector string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := s.admin.CoreV1().Pods(metav1.NamespaceDefault)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		b.Logf("cleanup: list pods %s: %v", selector, err)
	}
	uids := map[string]bool{}
	for _, p := range list.Items {
		uids[string(p.UID)] = true
	}
	zero := int64(0)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		b.Logf("cleanup: delete pods %s: %v", selector, err)
	}
	// left lists the pods' containers, running ones only unless all.
	left := func(all bool) []string {
		args := []string{"ps", "--filter", "label=io.microlet.instance=" + s.Instance, "--format", `{{.ID}} {{.Label "io.microlet.pod-uid"}}`}
		if all {
			args = append(args, "-a")
		}
		out, err := exec.CommandContext(ctx, "docker", args...).Output()
		if err != nil {
			b.Logf("cleanup: docker ps: %v", err)
			return nil
		}
		var ids []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if id, uid, ok := strings.Cut(line, " "); ok && uids[uid] {
				ids = append(ids, id)
			}
		}
		return ids
	}
	var running []string
	_ = wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(context.Context) (bool, error) {
		running = left(false)
		return len(running) == 0, nil
	})
	ids := left(true)
	b.Logf("cleanup: deleted %d pods (%s); %d of their containers still ran when the wait ended, %d existed", len(uids), selector, len(running), len(ids))
	if len(ids) > 0 {
		if out, err := exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, ids...)...).CombinedOutput(); err != nil {
			b.Logf("cleanup: docker rm: %v: %s", err, out)
		}
	}
}

// criCalls is runtime-shim's CRI calls so far by method.
func criCalls(b testing.TB, addr string) map[string]float64 {
	calls, err := testenv.ScrapeCRICalls(context.Background(), addr)
	if err != nil {
		b.Fatal(err)
	}
	return calls
}

func componentNames() []string {
	out := make([]string, len(components.All))
	for i, c := range components.All {
		out[i] = c.Name
	}
	return out
}

// freeLoopbackAddr is a 127.0.0.1 port free right now.
func freeLoopbackAddr(t testing.TB) string {
	t.Helper()
	addr, err := testenv.FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
