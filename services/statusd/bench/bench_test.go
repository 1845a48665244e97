package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/store"
	"github.com/microlet/microlet/services/statusd/internal/syncer"

	"github.com/microlet/microlet/services/statusd/bench/upstream"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

const (
	podCount = 110
	node     = "bench-node"
	ns       = "bench"
)

func client(t *testing.T, cfg *rest.Config, qps float32, burst int) kubernetes.Interface {
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

// podRequests sums apiserver_request_total for pods by verb.
func podRequests(ctx context.Context, admin kubernetes.Interface) (map[string]float64, error) {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "apiserver_request_total{") || !strings.Contains(l, `resource="pods"`) {
			continue
		}
		i := strings.Index(l, `verb="`)
		j := strings.LastIndexByte(l, ' ')
		if i < 0 || j < 0 {
			continue
		}
		verb := l[i+6:]
		verb = verb[:strings.IndexByte(verb, '"')]
		v, _ := strconv.ParseFloat(l[j+1:], 64)
		if strings.Contains(l, `subresource="status"`) {
			verb += "/status"
		}
		out[verb] += v
	}
	return out, sc.Err()
}

type result struct {
	impl            string
	qps             string
	rate            string
	changes         int
	seconds         float64
	perSec          float64
	reqPerChange    float64
	writesPerChange float64
	p50, p99        time.Duration
	unseen          int
}

func TestBench(t *testing.T) {
	if os.Getenv("STATUSD_BENCH") == "" {
		t.Skip("set STATUSD_BENCH=1 to run the benchmark")
	}
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
	for i := range pods {
		p, err := admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%03d", i), Namespace: ns},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = p
	}
	index := map[string]int{}
	for i, p := range pods {
		index[p.Name] = i
	}

	// One watch records when each restartCount value becomes visible.
	var mu sync.Mutex
	seen := make([]map[int32]time.Time, podCount)
	for i := range seen {
		seen[i] = map[int32]time.Time{}
	}
	latest := make([]atomic.Int32, podCount)
	notify := make([]chan struct{}, podCount)
	for i := range notify {
		notify[i] = make(chan struct{}, 1)
	}
	w, err := admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type != watch.Modified {
				continue
			}
			p := ev.Object.(*corev1.Pod)
			i, ok := index[p.Name]
			if !ok || len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			rc := p.Status.ContainerStatuses[0].RestartCount
			now := time.Now()
			mu.Lock()
			if _, ok := seen[i][rc]; !ok {
				seen[i][rc] = now
			}
			mu.Unlock()
			for {
				cur := latest[i].Load()
				if rc <= cur {
					break
				}
				if latest[i].CompareAndSwap(cur, rc) {
					select {
					case notify[i] <- struct{}{}:
					default:
					}
					break
				}
			}
		}
	}()

	next := make([]int32, podCount) // last restartCount set per pod
	var results []result
	run := func(impl, qpsName string, qps float32, burst int, rateName string, rate float64, d time.Duration) {
		nc := client(t, cp.NodeConfig(node), qps, burst)
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var setStatus func(i int, st *corev1.PodStatus) error
		switch impl {
		case "statusd":
			st, err := store.Open(filepath.Join(t.TempDir(), "statusd.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = st.Close() }()
			var sy atomic.Pointer[syncer.Syncer]
			c := cache.New(st, cache.WithOnChange(func(uid string) {
				if x := sy.Load(); x != nil {
					x.Enqueue(uid)
				}
			}))
			factory := informers.NewSharedInformerFactoryWithOptions(nc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
			}))
			x := syncer.New(nc, c, factory.Core().V1().Pods().Informer(), syncer.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			sy.Store(x)
			factory.Start(rctx.Done())
			factory.WaitForCacheSync(rctx.Done())
			go x.Run(rctx)
			defer factory.Shutdown()
			setStatus = func(i int, s *corev1.PodStatus) error { _, err := c.SetPodStatus(pods[i], s); return err }
		case "upstream":
			m := upstream.New(nc, pods)
			m.Start(rctx)
			setStatus = func(i int, s *corev1.PodStatus) error { m.SetPodStatus(pods[i], s); return nil }
		}

		type change struct {
			pod int
			rc  int32
			at  time.Time
		}
		var changes []change
		var cmu sync.Mutex
		status := func(rc int32) *corev1.PodStatus {
			return &corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
				Name: "c", Image: "busybox", ImageID: "docker://sha", ContainerID: "docker://c", RestartCount: rc,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			}}}
		}
		before, err := podRequests(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		set := func(i int) {
			rc := atomic.AddInt32(&next[i], 1)
			at := time.Now()
			if err := setStatus(i, status(rc)); err != nil {
				t.Error(err)
				return
			}
			cmu.Lock()
			changes = append(changes, change{i, rc, at})
			cmu.Unlock()
		}
		if rate > 0 {
			interval := time.Duration(float64(time.Second) / rate)
			tick := time.NewTicker(interval)
			k := 0
			var wg sync.WaitGroup
			for time.Since(start) < d {
				<-tick.C
				// Asynchronously, like independent pod workers: an fsync
				// must not slow the offered rate.
				i := k % podCount
				wg.Go(func() { set(i) })
				k++
			}
			tick.Stop()
			wg.Wait()
		} else {
			// Flat out, closed loop: one writer per pod sets a value and
			// waits until the watch shows it before the next, so every
			// change is synced on its own and none is coalesced away.
			var wg sync.WaitGroup
			for i := range podCount {
				wg.Go(func() {
					for time.Since(start) < d {
						set(i)
						want := atomic.LoadInt32(&next[i])
						for latest[i].Load() < want && time.Since(start) < d+time.Minute {
							select {
							case <-notify[i]:
							case <-time.After(time.Second):
							}
						}
					}
				})
			}
			wg.Wait()
		}
		// Wait until every pod's last value is visible.
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			done := true
			for i := range podCount {
				if latest[i].Load() < atomic.LoadInt32(&next[i]) {
					done = false
					break
				}
			}
			if done {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		end := time.Now()
		after, err := podRequests(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		var reqs, writes float64
		for verb, v := range after {
			d := v - before[verb]
			if verb == "WATCH" || verb == "LIST" {
				continue // the informer's start and the bench's own watch
			}
			reqs += d
			if verb == "PATCH/status" || verb == "UPDATE/status" {
				writes += d
			}
		}
		var lat []time.Duration
		unseen := 0
		mu.Lock()
		for _, ch := range changes {
			var first time.Time
			for rc, at := range seen[ch.pod] {
				if rc >= ch.rc && (first.IsZero() || at.Before(first)) {
					first = at
				}
			}
			if first.IsZero() {
				unseen++
				continue
			}
			lat = append(lat, first.Sub(ch.at))
		}
		mu.Unlock()
		slices.Sort(lat)
		pct := func(p float64) time.Duration {
			if len(lat) == 0 {
				return 0
			}
			return lat[min(len(lat)-1, int(float64(len(lat))*p))]
		}
		secs := end.Sub(start).Seconds()
		n := len(changes)
		results = append(results, result{
			impl: impl, qps: qpsName, rate: rateName, changes: n, seconds: secs, perSec: float64(n) / secs,
			reqPerChange: reqs / float64(n), writesPerChange: writes / float64(n),
			p50: pct(0.50), p99: pct(0.99), unseen: unseen,
		})
		cancel()
	}

	d := 8 * time.Second
	if s := os.Getenv("STATUSD_BENCH_SECONDS"); s != "" {
		if v, err := strconv.Atoi(s); err == nil {
			d = time.Duration(v) * time.Second
		}
	}
	for _, q := range []struct {
		name  string
		qps   float32
		burst int
	}{{"50/100", 50, 100}, {"unlimited", -1, 0}} {
		for _, r := range []float64{1, 5, 20, 100, 0} {
			name := "flat out"
			if r > 0 {
				name = fmt.Sprintf("%g/s", r)
			}
			for _, impl := range []string{"statusd", "upstream"} {
				run(impl, q.name, q.qps, q.burst, name, r, d)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d pods, %s per row, node identity, real kube-apiserver; statusd vs upstream pkg/kubelet/status\n", podCount, d)
	fmt.Fprintf(&b, "%-9s %-10s %-9s %8s %9s %10s %9s %10s %10s %7s\n", "impl", "qps/burst", "rate", "changes", "synced/s", "req/chg", "wr/chg", "p50", "p99", "unseen")
	for _, r := range results {
		fmt.Fprintf(&b, "%-9s %-10s %-9s %8d %9.1f %10.3f %9.3f %10s %10s %7d\n", r.impl, r.qps, r.rate, r.changes, r.perSec, r.reqPerChange, r.writesPerChange,
			r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.unseen)
	}
	fmt.Fprintf(&b, "\nratios statusd/upstream\n%-10s %-9s %12s %12s %12s\n", "qps/burst", "rate", "synced/s", "p50", "p99")
	for i := 0; i+1 < len(results); i += 2 {
		a, u := results[i], results[i+1]
		ratio := func(x, y float64) string {
			if y == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2fx", x/y)
		}
		fmt.Fprintf(&b, "%-10s %-9s %12s %12s %12s\n", a.qps, a.rate, ratio(a.perSec, u.perSec),
			ratio(float64(a.p50), float64(u.p50)), ratio(float64(a.p99), float64(u.p99)))
	}
	fmt.Print(b.String())
}
