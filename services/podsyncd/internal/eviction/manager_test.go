package eviction

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/evictionapi"
	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

func qv(s string) uint64 {
	if s == "" {
		return 0
	}
	q := resource.MustParse(s)
	return uint64(q.Value())
}
func p64(v uint64) *uint64 { return &v }

// podSpec makes a pod with one container "c" (or the given name) of the
// given requests and limits.
func podSpec(name string, requests, limits corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: name,
			Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits}}}},
	}
}

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

type podUse struct {
	memory, rootfs, logs string
	procs                uint64
	volumes              map[string]string // emptyDir name -> used
	ephemeral            string            // the pod's ephemeral storage
}

// world is a fake node: the Summary is built from its fields.
type world struct {
	metrics         *kubeletmetrics.Metrics
	memAvail, memWS string
	nodefsAvail     string
	nodefsCap       string
	imagefsAvail    string
	pidMax, pids    int64
	pods            []*corev1.Pod
	use             map[string]podUse
	clock           *testingclock.FakeClock
}

func (w *world) summary(context.Context) (*statsapi.Summary, error) {
	t := metav1.NewTime(w.clock.Now())
	s := &statsapi.Summary{Node: statsapi.NodeStats{
		Memory:  &statsapi.MemoryStats{Time: t, AvailableBytes: p64(qv(w.memAvail)), WorkingSetBytes: p64(qv(w.memWS))},
		Fs:      &statsapi.FsStats{Time: t, AvailableBytes: p64(qv(w.nodefsAvail)), CapacityBytes: p64(qv(w.nodefsCap)), InodesFree: p64(1000), Inodes: p64(2000)},
		Runtime: &statsapi.RuntimeStats{ImageFs: &statsapi.FsStats{Time: t, AvailableBytes: p64(qv(w.imagefsAvail)), CapacityBytes: p64(qv("100Gi"))}},
		Rlimit:  &statsapi.RlimitStats{Time: t, MaxPID: &w.pidMax, NumOfRunningProcesses: &w.pids},
	}}
	for _, p := range w.pods {
		u, ok := w.use[p.Name]
		if !ok {
			continue
		}
		c := statsapi.ContainerStats{Name: p.Spec.Containers[0].Name,
			Memory: &statsapi.MemoryStats{WorkingSetBytes: p64(qv(u.memory))},
			Rootfs: &statsapi.FsStats{UsedBytes: p64(qv(u.rootfs))},
			Logs:   &statsapi.FsStats{UsedBytes: p64(qv(u.logs))}}
		ps := statsapi.PodStats{
			PodRef:       statsapi.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)},
			Containers:   []statsapi.ContainerStats{c},
			Memory:       &statsapi.MemoryStats{WorkingSetBytes: p64(qv(u.memory))},
			ProcessStats: &statsapi.ProcessStats{ProcessCount: p64(u.procs)},
		}
		for name, used := range u.volumes {
			ps.VolumeStats = append(ps.VolumeStats, statsapi.VolumeStats{Name: name, FsStats: statsapi.FsStats{UsedBytes: p64(qv(used))}})
		}
		if u.ephemeral != "" {
			ps.EphemeralStorage = &statsapi.FsStats{UsedBytes: p64(qv(u.ephemeral))}
		}
		s.Pods = append(s.Pods, ps)
	}
	return s, nil
}

type evicted struct {
	pod       string
	grace     int64
	msg       string
	condition bool
}

func newWorld() *world {
	return &world{memAvail: "3Gi", memWS: "1Gi", nodefsAvail: "50Gi", nodefsCap: "100Gi", imagefsAvail: "50Gi",
		pidMax: 4000, pids: 100, use: map[string]podUse{}, clock: testingclock.NewFakeClock(time.Unix(10000, 0))}
}

func (w *world) manager(t *testing.T, cfg Config, got *[]evicted) *Manager {
	t.Helper()
	w.metrics = kubeletmetrics.New()
	return New(cfg, Deps{
		Metrics:          w.metrics,
		Summary:          w.summary,
		DedicatedImageFs: func(context.Context) (bool, error) { return false, nil },
		ActivePods:       func() []*corev1.Pod { return w.pods },
		Evict: func(pod *corev1.Pod, grace int64, msg string, condition bool) {
			*got = append(*got, evicted{pod.Name, grace, msg, condition})
		},
		Clock: w.clock,
	})
}

// evictions is kubelet_evictions{eviction_signal=signal}.
func (w *world) evictions(t *testing.T, signal string) float64 {
	t.Helper()
	m, err := testenv.GatherMetrics(w.metrics.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("kubelet_evictions", map[string]string{"eviction_signal": signal})
}

func mustParse(t *testing.T, c evictionapi.Config) []evictionapi.Threshold {
	t.Helper()
	th, err := evictionapi.Parse(c)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

// The vectors below are upstream's (pkg/kubelet/eviction
// eviction_manager_test.go): same thresholds, usage and expected message.
func TestMemoryPressureEvictsBestEffortFirst(t *testing.T) {
	w := newWorld()
	w.memAvail, w.memWS = "1500Mi", "2Gi"
	be := podSpec("best-effort", nil, nil)
	guaranteed := podSpec("guaranteed", rl("cpu", "100m", "memory", "1Gi"), rl("cpu", "100m", "memory", "1Gi"))
	burstable := podSpec("burstable", rl("memory", "100Mi"), rl("memory", "1Gi"))
	w.pods = []*corev1.Pod{guaranteed, burstable, be}
	w.use = map[string]podUse{"best-effort": {memory: "400Mi"}, "guaranteed": {memory: "900Mi"}, "burstable": {memory: "300Mi"}}
	var got []evicted
	m := w.manager(t, Config{Thresholds: mustParse(t, evictionapi.Config{Hard: map[string]string{"memory.available": "2Gi"}}),
		PressureTransitionPeriod: time.Minute}, &got)
	pods, err := m.Synchronize(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !m.Pressure().Has(corev1.NodeMemoryPressure) {
		t.Fatalf("no memory pressure: %+v", m.Pressure())
	}
	// best-effort and burstable exceed their requests; equal priority;
	// best-effort uses more above its request (400Mi vs 200Mi).
	if len(pods) != 1 || pods[0].Name != "best-effort" || len(got) != 1 {
		t.Fatalf("evicted %v, calls %+v", pods, got)
	}
	want := "The node was low on resource: memory. Threshold quantity: 2Gi, available: 1500Mi. " +
		"Container best-effort was using 400Mi, request is 0, has larger consumption of memory. "
	// A hard threshold evicts with the kubelet's immediate grace period
	// (1 s) and a DisruptionTarget condition.
	if got[0].msg != want || got[0].grace != 1 || !got[0].condition {
		t.Fatalf("evicted %+v\nwant message %q grace 1 with a condition", got[0], want)
	}
	if n := w.evictions(t, "memory.available"); n != 1 {
		t.Fatalf("kubelet_evictions{eviction_signal=memory.available} = %v after one eviction, want 1", n)
	}
	ok, reason, msg := m.Admit(podSpec("new-best-effort", nil, nil))
	if ok || reason != "Evicted" || msg != "The node had condition: [MemoryPressure]. " {
		t.Fatalf("BestEffort admitted under memory pressure: %v %q %q", ok, reason, msg)
	}
	tolerant := podSpec("tolerant", nil, nil)
	tolerant.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	if ok, _, _ := m.Admit(tolerant); !ok {
		t.Fatal("BestEffort pod tolerating the memory-pressure taint refused")
	}
	if ok, _, _ := m.Admit(burstable); !ok {
		t.Fatal("Burstable pod refused under memory pressure alone")
	}
}

func TestDiskPressureNoImageFs(t *testing.T) {
	w := newWorld()
	w.nodefsAvail = "1.5Gi"
	below := podSpec("below-requests", rl("ephemeral-storage", "1Gi"), rl("ephemeral-storage", "1Gi"))
	above := podSpec("above-requests", rl("ephemeral-storage", "100Mi"), rl("ephemeral-storage", "1Gi"))
	w.pods = []*corev1.Pod{below, above}
	w.use = map[string]podUse{"below-requests": {rootfs: "900Mi", logs: "0"}, "above-requests": {rootfs: "700Mi", logs: "0"}}
	var got []evicted
	var reclaimed []string
	m := w.manager(t, Config{Thresholds: mustParse(t, evictionapi.Config{Hard: map[string]string{"nodefs.available": "2Gi"}}),
		PressureTransitionPeriod: time.Minute}, &got)
	m.deps.DeleteUnusedContainers = func(context.Context) error { reclaimed = append(reclaimed, "containers"); return nil }
	m.deps.DeleteUnusedImages = func(context.Context) error { reclaimed = append(reclaimed, "images"); return nil }
	if _, err := m.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(reclaimed) != "[containers images]" {
		t.Fatalf("node-level reclaim = %v, want containers then images", reclaimed)
	}
	want := "The node was low on resource: ephemeral-storage. Threshold quantity: 2Gi, available: 1536Mi. " +
		"Container above-requests was using 700Mi, request is 100Mi, has larger consumption of ephemeral-storage. "
	if len(got) != 1 || got[0].pod != "above-requests" || got[0].msg != want {
		t.Fatalf("evicted %+v, want above-requests with %q", got, want)
	}
	ok, reason, msg := m.Admit(podSpec("guaranteed", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi")))
	if ok || reason != "Evicted" || msg != "The node had condition: [DiskPressure]. " {
		t.Fatalf("pod admitted under disk pressure: %v %q %q", ok, reason, msg)
	}
}

func TestNodeLevelReclaimEnoughEvictsNothing(t *testing.T) {
	w := newWorld()
	w.nodefsAvail = "1Gi"
	w.pods = []*corev1.Pod{podSpec("a", nil, nil)}
	w.use = map[string]podUse{"a": {rootfs: "10Mi", logs: "0"}}
	var got []evicted
	th := mustParse(t, evictionapi.Config{Hard: map[string]string{"nodefs.available": "2Gi"}, MinimumReclaim: map[string]string{"nodefs.available": "1Gi"}})
	m := w.manager(t, Config{Thresholds: th, PressureTransitionPeriod: time.Minute}, &got)
	// Reclaim frees enough for the threshold but not for the minimum reclaim:
	// pods still go.
	m.deps.DeleteUnusedImages = func(context.Context) error { w.nodefsAvail = "2.5Gi"; return nil }
	if _, err := m.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("minimum reclaim not enforced after node-level reclaim: evicted %+v", got)
	}
	// Enough for threshold plus minimum reclaim: no pod.
	w.nodefsAvail = "1Gi"
	w.clock.Step(time.Second)
	m.deps.DeleteUnusedImages = func(context.Context) error { w.nodefsAvail = "3.5Gi"; return nil }
	if _, err := m.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("evicted although node-level reclaim sufficed: %+v", got)
	}
}

func TestPIDPressure(t *testing.T) {
	w := newWorld()
	w.pidMax, w.pids = 1500, 1000
	low := podSpec("low-procs", nil, nil)
	high := podSpec("high-procs", nil, nil)
	prio := int32(100)
	important := podSpec("important", nil, nil)
	important.Spec.Priority = &prio
	w.pods = []*corev1.Pod{important, low, high}
	w.use = map[string]podUse{"low-procs": {procs: 5}, "high-procs": {procs: 50}, "important": {procs: 500}}
	var got []evicted
	m := w.manager(t, Config{Thresholds: mustParse(t, evictionapi.Config{Hard: map[string]string{"pid.available": "1200"}}),
		PressureTransitionPeriod: time.Minute}, &got)
	if _, err := m.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "The node was low on resource: pids. Threshold quantity: 1200, available: 500. "
	if len(got) != 1 || got[0].pod != "high-procs" || got[0].msg != want {
		t.Fatalf("evicted %+v, want high-procs with %q", got, want)
	}
	if !m.Pressure().Has(corev1.NodePIDPressure) {
		t.Fatal("no PIDPressure")
	}
}

func TestSoftThresholdGraceAndTransitionPeriod(t *testing.T) {
	w := newWorld()
	w.memAvail, w.memWS = "1500Mi", "2Gi"
	grace := int64(60)
	p := podSpec("a", nil, nil)
	p.Spec.TerminationGracePeriodSeconds = &grace
	w.pods = []*corev1.Pod{p}
	w.use = map[string]podUse{"a": {memory: "100Mi"}}
	var got []evicted
	th := mustParse(t, evictionapi.Config{
		Soft: map[string]string{"memory.available": "2Gi"}, SoftGracePeriod: map[string]string{"memory.available": "30s"}})
	m := w.manager(t, Config{Thresholds: th, PressureTransitionPeriod: 5 * time.Minute, MaxPodGracePeriodSeconds: 20}, &got)
	sync := func() {
		t.Helper()
		if _, err := m.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	if len(got) != 0 || !m.Pressure().Has(corev1.NodeMemoryPressure) {
		t.Fatalf("soft threshold: evicted %+v before its grace period, pressure %+v", got, m.Pressure())
	}
	w.clock.Step(31 * time.Second)
	sync()
	if len(got) != 1 || got[0].grace != 20 {
		t.Fatalf("after the grace period: evicted %+v, want one with grace min(60, 20)", got)
	}
	// Memory back: the condition holds for the transition period.
	w.memAvail, w.memWS = "3Gi", "512Mi"
	w.clock.Step(4 * time.Minute)
	sync()
	if !m.Pressure().Has(corev1.NodeMemoryPressure) {
		t.Fatal("MemoryPressure dropped inside the transition period")
	}
	w.clock.Step(61 * time.Second)
	sync()
	if p := m.Pressure(); len(p.Conditions) != 0 || len(p.Signals) != 0 {
		t.Fatalf("pressure held after the transition period: %+v", p)
	}
	if ok, _, _ := m.Admit(podSpec("be", nil, nil)); !ok {
		t.Fatal("BestEffort refused without pressure")
	}
}

func TestCriticalPodsNeverEvicted(t *testing.T) {
	w := newWorld()
	w.memAvail, w.memWS = "100Mi", "3Gi"
	static := podSpec("static", nil, nil)
	static.Annotations = map[string]string{podsource.SourceAnnotation: podsource.FileSource}
	prio := podutil.SystemCriticalPriority
	critical := podSpec("critical", nil, nil)
	critical.Spec.Priority = &prio
	w.pods = []*corev1.Pod{static, critical}
	w.use = map[string]podUse{"static": {memory: "2Gi"}, "critical": {memory: "1Gi"}}
	var got []evicted
	m := w.manager(t, Config{Thresholds: mustParse(t, evictionapi.Config{Hard: evictionapi.DefaultEvictionHard}),
		PressureTransitionPeriod: time.Minute}, &got)
	pods, err := m.Synchronize(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 0 || len(got) != 0 {
		t.Fatalf("evicted a critical pod: %+v", got)
	}
	if n := w.evictions(t, "memory.available"); n != 0 {
		t.Fatalf("kubelet_evictions = %v with nothing evicted", n)
	}
	if ok, _, _ := m.Admit(critical); !ok {
		t.Fatal("critical pod refused under pressure")
	}
}

func TestRankMemoryWithoutStatsFirst(t *testing.T) {
	a, b, c := podSpec("a", nil, nil), podSpec("b", nil, nil), podSpec("c", nil, nil)
	stats := func(p *corev1.Pod) (*statsapi.PodStats, bool) {
		switch p.Name {
		case "a":
			return &statsapi.PodStats{Memory: &statsapi.MemoryStats{WorkingSetBytes: p64(10)}}, true
		case "c":
			return &statsapi.PodStats{Memory: &statsapi.MemoryStats{WorkingSetBytes: p64(20)}}, true
		}
		return nil, false
	}
	got := rank([]*corev1.Pod{a, b, c}, stats, ranking{kind: rankMemory})
	if got[0].Name != "b" || got[1].Name != "c" || got[2].Name != "a" {
		t.Fatalf("order %s %s %s, want b (no stats), c, a", got[0].Name, got[1].Name, got[2].Name)
	}
}

// TestEvictionAcrossClockSteps: under memory pressure with a soft threshold
// (30 s grace) and a 5-minute transition period, the clock is stepped
// back an hour (the stats, dated by the wall clock, go back with it). The
// grace period still ends 30 s after the step, the eviction still happens
// (new readings are earlier than the last, but new), and the condition
// clears 5 minutes after memory came back, not an hour and 5 minutes.
// Stepped forward three days, a hard threshold still evicts and the
// condition holds its transition period from then.
func TestEvictionAcrossClockSteps(t *testing.T) {
	w := newWorld()
	w.memAvail, w.memWS = "1500Mi", "2Gi"
	w.pods = []*corev1.Pod{podSpec("a", nil, nil), podSpec("b", nil, nil)}
	w.use = map[string]podUse{"a": {memory: "200Mi"}, "b": {memory: "100Mi"}}
	var got []evicted
	th := mustParse(t, evictionapi.Config{
		Hard: map[string]string{"memory.available": "100Mi"},
		Soft: map[string]string{"memory.available": "2Gi"}, SoftGracePeriod: map[string]string{"memory.available": "30s"}})
	m := w.manager(t, Config{Thresholds: th, PressureTransitionPeriod: 5 * time.Minute, MaxPodGracePeriodSeconds: 20}, &got)
	sync := func(what string, wantEvicted int, wantPressure bool) {
		t.Helper()
		if _, err := m.Synchronize(context.Background()); err != nil {
			t.Fatal(err)
		}
		if len(got) != wantEvicted || m.Pressure().Has(corev1.NodeMemoryPressure) != wantPressure {
			t.Fatalf("%s: evicted %+v, pressure %+v; want %d evicted, pressure %v", what, got, m.Pressure(), wantEvicted, wantPressure)
		}
	}
	sync("soft threshold crossed", 0, true)
	w.clock.Step(10 * time.Second)
	sync("10 s in", 0, true)
	w.clock.Step(-time.Hour)
	sync("stepped back an hour", 0, true)
	w.clock.Step(29 * time.Second)
	sync("29 s after the step", 0, true)
	w.clock.Step(time.Second)
	sync("30 s after the step: grace over", 1, true)

	w.pods = w.pods[1:]
	w.memAvail, w.memWS = "3Gi", "512Mi"
	w.clock.Step(time.Minute)
	sync("memory back", 1, true)
	w.clock.Step(-24 * time.Hour)
	sync("stepped back a day", 1, true)
	w.clock.Step(4*time.Minute + 59*time.Second)
	sync("inside the transition period", 1, true)
	w.clock.Step(time.Second)
	sync("5 min after the step back: transition over", 1, false)

	w.clock.Step(72 * time.Hour)
	w.memAvail = "50Mi"
	sync("three days forward, under the hard threshold", 2, true)
	w.memAvail = "3Gi"
	w.clock.Step(4 * time.Minute)
	sync("4 min later", 2, true)
	w.clock.Step(time.Minute)
	sync("5 min later", 2, false)
}
