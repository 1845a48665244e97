package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

const (
	podCount = 110
	node     = "bench-node"
	ns       = "bench"
)

func client(t testing.TB, cfg *rest.Config, qps float32, burst int) kubernetes.Interface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = qps, burst
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// visibility records, from one watch, when each pod's restartCount value
// first became visible in the API.
type visibility struct {
	mu     sync.Mutex
	seen   [][]sighting // per pod, increasing rc
	latest []atomic.Int32
	notify []chan struct{}
	// restarts counts watches the API server ended early.
	restarts atomic.Int32
}

type sighting struct {
	rc int32
	at time.Time
}

func newVisibility() *visibility {
	v := &visibility{seen: make([][]sighting, podCount), latest: make([]atomic.Int32, podCount), notify: make([]chan struct{}, podCount)}
	for i := range v.notify {
		v.notify[i] = make(chan struct{}, 1)
	}
	return v
}

// follow lists the pods and watches them from there, again after every
// watch the API server ends (it closes the watch of a consumer that falls
// behind), until ctx ends.
func (v *visibility) follow(ctx context.Context, t testing.TB, c kubernetes.Interface, index map[string]int) {
	for ctx.Err() == nil {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			t.Logf("visibility list: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for i := range list.Items {
			v.record(&list.Items[i], index)
		}
		w, err := c.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Logf("visibility watch: %v", err)
			continue
		}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Modified {
				v.record(p, index)
			}
		}
		w.Stop()
		if ctx.Err() == nil {
			v.restarts.Add(1)
		}
	}
}

func (v *visibility) record(p *corev1.Pod, index map[string]int) {
	i, ok := index[p.Name]
	if !ok || len(p.Status.ContainerStatuses) == 0 {
		return
	}
	rc := p.Status.ContainerStatuses[0].RestartCount
	if rc <= v.latest[i].Load() {
		return
	}
	v.mu.Lock()
	v.seen[i] = append(v.seen[i], sighting{rc, time.Now()})
	v.mu.Unlock()
	v.latest[i].Store(rc)
	select {
	case v.notify[i] <- struct{}{}:
	default:
	}
}

// firstAtLeast is when pod i first showed a value >= rc: the moment a
// change, or a later change that replaced it, became visible.
func (v *visibility) firstAtLeast(i int, rc int32) (time.Time, bool) {
	s := v.seen[i]
	k, _ := slices.BinarySearchFunc(s, rc, func(x sighting, rc int32) int { return int(x.rc - rc) })
	if k == len(s) {
		return time.Time{}, false
	}
	return s[k].at, true
}

// row is one measured line of the table.
type row struct {
	impl, qps, rate    string
	changes, delivered int
	secs               float64
	reqs, writes       float64
	errors             float64 // pod requests answered other than 2xx
	watchRestarts      int32   // the bench's watch ended by the API server
	p50, p99           time.Duration
	before, after      snapshot
}

func (r row) perSec() float64 { return float64(r.delivered) / r.secs }

// settings are the benchmark's knobs, from the environment.
type settings struct {
	qps        []qpsSetting
	rates      []float64 // 0: flat out
	workers    int       // statusd's sync workers; 0: its default
	profileDir string
}

type qpsSetting struct {
	name  string
	qps   float32
	burst int
}

func loadSettings(t testing.TB) settings {
	s := settings{rates: []float64{1, 5, 20, 100, 500, 0}, profileDir: os.Getenv("MICROLET_BENCH_PROFILE")}
	if v := os.Getenv("MICROLET_BENCH_WORKERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("MICROLET_BENCH_WORKERS=%q: want a positive number", v)
		}
		s.workers = n
	}
	if v := os.Getenv("MICROLET_BENCH_RATES"); v != "" {
		s.rates = nil
		for _, f := range strings.Split(v, ",") {
			if f == "flat" {
				s.rates = append(s.rates, 0)
				continue
			}
			r, err := strconv.ParseFloat(f, 64)
			if err != nil || r <= 0 {
				t.Fatalf("MICROLET_BENCH_RATES: %q is neither a positive rate nor \"flat\"", f)
			}
			s.rates = append(s.rates, r)
		}
	}
	limited, unlimited := qpsSetting{"50/100", 50, 100}, qpsSetting{"unlimited", -1, 0}
	switch v := os.Getenv("MICROLET_BENCH_QPS"); v {
	case "", "all":
		s.qps = []qpsSetting{limited, unlimited}
	case "50/100":
		s.qps = []qpsSetting{limited}
	case "unlimited":
		s.qps = []qpsSetting{unlimited}
	default:
		t.Fatalf("MICROLET_BENCH_QPS=%q: want all, 50/100 or unlimited", v)
	}
	return s
}

func rateName(r float64) string {
	if r == 0 {
		return "flat out"
	}
	return fmt.Sprintf("%g/s", r)
}

// BenchmarkStatusManagers has one sub-benchmark per QPS setting, rate and
// implementation (statusd, upstream, and raw when unlimited and flat out);
// each makes b.N status changes and reports through b.ReportMetric the
// synced changes per second, p50/p99 from hand-over to visibility (ms), API
// requests and status writes per change, and the API server's and etcd's
// CPU per write (ms). The side-by-side table is printed at the end.
func BenchmarkStatusManagers(b *testing.B) {
	t := b
	cfg := loadSettings(t)
	cp := controlplane.Get(t)
	ctx := context.Background()
	admin := client(t, cp.AdminConfig(), -1, 0)
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	nodeAdmin := client(t, cp.NodeConfig(node), -1, 0)
	if _, err := nodeAdmin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := make([]*corev1.Pod, podCount)
	index := map[string]int{}
	for i := range pods {
		p, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", i), Namespace: ns},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = p
		index[p.Name] = i
	}
	vis := newVisibility()
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { vis.follow(wctx, t, admin, index); close(watchDone) }()
	defer func() { stopWatch(); <-watchDone }()

	bn := &bencher{cfg: cfg, cp: cp, admin: admin, pods: pods, vis: vis, next: make([]atomic.Int32, podCount)}
	var rows []row
	for _, q := range cfg.qps {
		for _, r := range cfg.rates {
			impls := []string{"statusd", "upstream"}
			if r == 0 && q.qps < 0 {
				impls = append(impls, "raw")
			}
			for _, impl := range impls {
				name := strings.NewReplacer("/", "-", " ", "-").Replace(fmt.Sprintf("qps=%s,rate=%s,impl=%s", q.name, rateName(r), impl))
				at := len(rows)
				rows = append(rows, row{})
				b.Run(name, func(sb *testing.B) {
					bn.t = sb
					res := bn.run(ctx, impl, q, r, sb.N)
					rows[at] = res // the last (largest) run of the row
					changes := float64(max(res.changes, 1))
					sb.ReportMetric(0, "ns/op") // the rate, not the code, sets the time per change
					sb.ReportMetric(res.perSec(), "synced/s")
					sb.ReportMetric(float64(res.p50.Microseconds())/1000, "p50-ms")
					sb.ReportMetric(float64(res.p99.Microseconds())/1000, "p99-ms")
					sb.ReportMetric(res.reqs/changes, "req/change")
					sb.ReportMetric(res.writes/changes, "writes/change")
					if res.writes > 0 {
						sb.ReportMetric(float64((res.after.apiCPU-res.before.apiCPU).Microseconds())/1000/res.writes, "apiserver-ms/write")
						sb.ReportMetric(float64((res.after.etcdCPU-res.before.etcdCPU).Microseconds())/1000/res.writes, "etcd-ms/write")
					}
				})
			}
		}
	}
	fmt.Print(report(cfg, rows))
}

// bencher runs rows against one control plane, pod set and watch.
type bencher struct {
	t     testing.TB // the running sub-benchmark
	cfg   settings
	cp    *controlplane.ControlPlane
	admin kubernetes.Interface
	pods  []*corev1.Pod
	vis   *visibility
	next  []atomic.Int32 // last restartCount set per pod, across rows
}

type change struct {
	pod int
	rc  int32
	at  time.Time
}

func status(rc int32) *corev1.PodStatus {
	return &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "c", Image: "busybox", ImageID: "docker://sha", ContainerID: "docker://c", RestartCount: rc,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
	}}}
}

// run makes n changes with impl at rate (0: flat out) and measures them.
func (b *bencher) run(ctx context.Context, impl string, q qpsSetting, rate float64, n int) row {
	t := b.t
	nc := client(t, b.cp.NodeConfig(node), q.qps, q.burst)
	var set setFunc
	var stop func()
	switch impl {
	case "statusd":
		set, stop = startStatusd(ctx, t, nc, b.pods, b.cfg.workers)
	case "upstream":
		set, stop = startUpstream(ctx, nc, b.pods)
	case "raw":
		set, stop = startRaw(nc, b.pods)
	}
	defer stop()
	if b.cfg.profileDir != "" && impl == "statusd" {
		defer b.profile(impl, q, rate)()
	}

	var changes []change
	var cmu sync.Mutex
	setOne := func(i int) {
		rc := b.next[i].Add(1)
		at := time.Now()
		if err := set(i, status(rc)); err != nil {
			t.Error(err)
			return
		}
		cmu.Lock()
		changes = append(changes, change{i, rc, at})
		cmu.Unlock()
	}
	apiPID, etcdPID := b.cp.APIServerPID(), b.cp.EtcdPID()
	restarts := b.vis.restarts.Load()
	before, err := takeSnapshot(ctx, b.admin, apiPID, etcdPID)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if rate > 0 {
		// Open loop: changes at a fixed rate, round-robin over the pods,
		// each handed over on its own goroutine like independent pod
		// workers, so a slow call never lowers the offered rate.
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		var wg sync.WaitGroup
		for k := range n {
			<-tick.C
			i := k % podCount
			wg.Go(func() { setOne(i) })
		}
		tick.Stop()
		wg.Wait()
	} else {
		// Flat out, closed loop: one writer per pod sets a value and waits
		// until the watch shows it before the next, so every change needs
		// a write of its own and none is coalesced away.
		var wg sync.WaitGroup
		var tickets atomic.Int64
		for i := range podCount {
			wg.Go(func() {
				for tickets.Add(1) <= int64(n) {
					setOne(i)
					want, handed := b.next[i].Load(), time.Now()
					for b.vis.latest[i].Load() < want && time.Since(handed) < time.Minute {
						select {
						case <-b.vis.notify[i]:
						case <-time.After(time.Second):
						}
					}
				}
			})
		}
		wg.Wait()
	}
	// The row ends when every pod's last value is visible (or after 2 min).
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && !b.allVisible() {
		time.Sleep(5 * time.Millisecond)
	}
	after, err := takeSnapshot(ctx, b.admin, apiPID, etcdPID)
	if err != nil {
		t.Fatal(err)
	}
	r := row{impl: impl, qps: q.name, rate: rateName(rate), changes: len(changes), secs: after.at.Sub(start).Seconds(), before: before, after: after,
		watchRestarts: b.vis.restarts.Load() - restarts}
	for verb, v := range after.reqs {
		n := v - before.reqs[verb]
		switch verb {
		case "error":
			r.errors += n
			continue
		case "WATCH", "LIST":
			continue // the informer's start and the bench's own watch
		}
		r.reqs += n
		if verb == "PATCH/status" || verb == "UPDATE/status" {
			r.writes += n
		}
	}
	var lat []time.Duration
	b.vis.mu.Lock()
	for _, ch := range changes {
		if at, ok := b.vis.firstAtLeast(ch.pod, ch.rc); ok {
			lat = append(lat, at.Sub(ch.at))
		}
	}
	b.vis.mu.Unlock()
	r.delivered = len(lat)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	r.p50, r.p99 = pct(0.50), pct(0.99)
	t.Logf("%s %s %s: %d changes, %.1f/s, load %.1f→%.1f", impl, q.name, r.rate, r.changes, r.perSec(), before.load, after.load)
	return r
}

func (b *bencher) allVisible() bool {
	for i := range podCount {
		if b.vis.latest[i].Load() < b.next[i].Load() {
			return false
		}
	}
	return true
}

// profile starts a CPU profile and mutex/block sampling for one row and
// returns the function that writes them to the profile directory.
func (b *bencher) profile(impl string, q qpsSetting, rate float64) func() {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(fmt.Sprintf("%s-%s-%s", impl, q.name, rateName(rate)))
	path := func(kind string) string { return filepath.Join(b.cfg.profileDir, name+"."+kind+".pprof") }
	f, err := os.Create(path("cpu"))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.t.Fatal(err)
	}
	runtime.SetMutexProfileFraction(10)
	runtime.SetBlockProfileRate(int(100 * time.Microsecond))
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		for _, kind := range []string{"mutex", "block"} {
			out, err := os.Create(path(kind))
			if err != nil {
				b.t.Fatal(err)
			}
			_ = pprof.Lookup(kind).WriteTo(out, 0)
			_ = out.Close()
		}
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
	}
}

func ratio(x, y float64) string {
	if y == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", x/y)
}

func perWrite(d time.Duration, writes float64) string {
	if writes == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000/writes)
}

func report(cfg settings, rows []row) string {
	var b strings.Builder
	workers := "default"
	if cfg.workers > 0 {
		workers = strconv.Itoa(cfg.workers)
	}
	fmt.Fprintf(&b, "\n%d pods, b.N changes per row, statusd sync workers %s, %d CPUs; node identity, real kube-apiserver\n", podCount, workers, runtime.NumCPU())
	fmt.Fprintf(&b, "synced/s: changes whose value, or a later value of the same pod, became visible through a watch, per second of the row (incl. the drain)\n")
	fmt.Fprintf(&b, "apisrv/etcd ms/wr: their CPU time over the row per status write; cores: apiserver CPU time / row time; bench ms/chg: this process's CPU per change\n\n")
	fmt.Fprintf(&b, "| qps/burst | rate | impl | changes | synced/s | req/chg | wr/chg | non-2xx | p50 | p99 | unseen | apisrv ms/wr | apisrv cores | etcd ms/wr | bench ms/chg | load start/end |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		api, etcd, me := r.after.apiCPU-r.before.apiCPU, r.after.etcdCPU-r.before.etcdCPU, r.after.me-r.before.me
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f | %.2f | %.2f | %.0f | %s | %s | %d | %s | %.2f | %s | %s | %.1f/%.1f |\n",
			r.qps, r.rate, r.impl, r.changes, r.perSec(), r.reqs/float64(max(r.changes, 1)), r.writes/float64(max(r.changes, 1)), r.errors,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.changes-r.delivered,
			perWrite(api, r.writes), api.Seconds()/r.secs, perWrite(etcd, r.writes), perWrite(me, float64(r.changes)),
			r.before.load, r.after.load)
	}
	for _, r := range rows {
		if r.watchRestarts > 0 {
			fmt.Fprintf(&b, "note: the API server ended the bench's watch %d times during %s %s %s (relisted; latencies of that row are upper bounds)\n", r.watchRestarts, r.impl, r.qps, r.rate)
		}
	}
	fmt.Fprintf(&b, "\n| qps/burst | rate | synced/s statusd/upstream | p50 | p99 | statusd/raw ceiling | raw ceiling/upstream |\n|---|---|---|---|---|---|---|\n")
	type key struct{ qps, rate string }
	by := map[key]map[string]row{}
	var order []key
	for _, r := range rows {
		k := key{r.qps, r.rate}
		if by[k] == nil {
			by[k] = map[string]row{}
			order = append(order, k)
		}
		by[k][r.impl] = r
	}
	for _, k := range order {
		s, u := by[k]["statusd"], by[k]["upstream"]
		rawS, rawU := "-", "-"
		if raw, ok := by[k]["raw"]; ok {
			rawS, rawU = ratio(s.perSec(), raw.perSec()), ratio(raw.perSec(), u.perSec())
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", k.qps, k.rate, ratio(s.perSec(), u.perSec()),
			ratio(float64(s.p50), float64(u.p50)), ratio(float64(s.p99), float64(u.p99)), rawS, rawU)
	}
	return b.String()
}
