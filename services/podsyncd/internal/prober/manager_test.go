package prober

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// script feeds a worker results one probe at a time and lets the test step
// the fake clock only once the worker is waiting again.
type script struct {
	mu      sync.Mutex
	results map[Kind][]Result
	calls   chan Kind
}

func (s *script) run(_ context.Context, p *corev1.Probe, t Target) (Result, string, error) {
	kind := Readiness
	switch p {
	case t.Container.LivenessProbe:
		kind = Liveness
	case t.Container.StartupProbe:
		kind = Startup
	}
	s.mu.Lock()
	r := Failure
	if q := s.results[kind]; len(q) > 0 {
		r, s.results[kind] = q[0], q[1:]
	}
	s.mu.Unlock()
	s.calls <- kind
	return r, "scripted", nil
}

func podWith(c corev1.Container) (*corev1.Pod, *podruntime.PodStatus) {
	pod := &corev1.Pod{}
	pod.UID = types.UID("uid-1")
	pod.Spec.Containers = []corev1.Container{c}
	st := &podruntime.PodStatus{UID: pod.UID, Sandboxes: []podruntime.SandboxStatus{{ID: "sb", Ready: true, IP: "10.0.0.2"}},
		Containers: []podruntime.ContainerStatus{{ID: "c1", Name: c.Name, State: podruntime.StateRunning}}}
	return pod, st
}

func waitCall(t *testing.T, s *script) Kind {
	t.Helper()
	select {
	case k := <-s.calls:
		return k
	case <-time.After(30 * time.Second):
		t.Fatal("probe never ran")
	}
	return ""
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 30*time.Second, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

func TestReadinessThresholds(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &script{results: map[Kind][]Result{Readiness: {Success, Success, Failure, Success}}, calls: make(chan Kind, 10)}
	changes := make(chan types.UID, 100)
	m := NewWithRunner(s.run, clk, nil, func(uid types.UID) { changes <- uid })
	defer m.Stop()
	c := corev1.Container{Name: "app", ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, SuccessThreshold: 2, FailureThreshold: 1}}
	pod, st := podWith(c)
	m.Sync(pod, st)
	spec := &pod.Spec.Containers[0]
	waitCall(t, s)
	if m.Ready(spec, "c1") {
		t.Fatal("ready after one success with successThreshold 2")
	}
	for _, want := range []bool{true, false, false} { // 2nd success, failure, 1st success again
		eventually(t, "worker waiting on its ticker", func() bool { return clk.HasWaiters() })
		clk.Step(time.Second)
		waitCall(t, s)
		eventually(t, "verdict", func() bool { return m.Ready(spec, "c1") == want })
	}
	if len(changes) == 0 {
		t.Fatal("verdict changes never reported")
	}
}

func TestLivenessFailureAndStartupGate(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &script{results: map[Kind][]Result{Startup: {Success}, Liveness: {Failure, Failure}}, calls: make(chan Kind, 10)}
	rec := record.NewFakeRecorder(10)
	m := NewWithRunner(s.run, clk, nil, nil, WithRecorder(rec))
	defer m.Stop()
	grace := int64(3)
	c := corev1.Container{Name: "app",
		StartupProbe:  &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 3},
		LivenessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 2, TerminationGracePeriodSeconds: &grace},
	}
	pod, st := podWith(c)
	spec := &pod.Spec.Containers[0]
	if m.Started(spec, "c1") {
		t.Fatal("started before the startup probe ran")
	}
	m.Sync(pod, st)
	// Only the startup probe runs until it succeeds.
	if k := waitCall(t, s); k != Startup {
		t.Fatalf("first probe was %s, want Startup (startup gates liveness)", k)
	}
	eventually(t, "started", func() bool { return m.Started(spec, "c1") })
	for i := 0; i < 2; i++ {
		eventually(t, "worker waiting on its ticker", func() bool { return clk.HasWaiters() })
		clk.Step(time.Second)
		for k := waitCall(t, s); k != Liveness; k = waitCall(t, s) {
		}
	}
	eventually(t, "liveness failure", func() bool { _, _, failed := m.FailedProbe(spec, "c1"); return failed })
	probe, g, _ := m.FailedProbe(spec, "c1")
	if probe != "liveness" || g == nil || *g != 3 {
		t.Fatalf("FailedProbe = %q, %v", probe, g)
	}
	// Every failed run is an Unhealthy event in upstream's words.
	for i := 0; i < 2; i++ {
		if ev := <-rec.Events; ev != "Warning Unhealthy Liveness probe failed: scripted" {
			t.Fatalf("event %d = %q", i, ev)
		}
	}
	// The restarted instance is a new container ID with a clean slate.
	st.Containers[0] = podruntime.ContainerStatus{ID: "c2", Name: "app", State: podruntime.StateRunning}
	m.Sync(pod, st)
	if _, _, failed := m.FailedProbe(spec, "c1"); failed {
		t.Fatal("old instance's verdict kept")
	}
}

// A sidecar (restartable init container) is probed like an app container;
// a regular init container is not.
func TestSidecarProbed(t *testing.T) {
	s := &script{results: map[Kind][]Result{Startup: {Success}}, calls: make(chan Kind, 10)}
	m := NewWithRunner(s.run, clocktesting.NewFakeClock(time.Now()), nil, nil)
	defer m.Stop()
	always := corev1.ContainerRestartPolicyAlways
	probe := &corev1.Probe{PeriodSeconds: 1}
	sidecar := corev1.Container{Name: "sidecar", RestartPolicy: &always, StartupProbe: probe}
	plain := corev1.Container{Name: "init", StartupProbe: probe}
	pod := &corev1.Pod{}
	pod.UID = "uid-1"
	pod.Spec.InitContainers = []corev1.Container{plain, sidecar}
	pod.Spec.Containers = []corev1.Container{{Name: "app"}}
	st := &podruntime.PodStatus{UID: pod.UID, Sandboxes: []podruntime.SandboxStatus{{ID: "sb", Ready: true, IP: "10.0.0.2"}},
		Containers: []podruntime.ContainerStatus{
			{ID: "s1", Name: "sidecar", State: podruntime.StateRunning, Init: true},
			{ID: "i1", Name: "init", State: podruntime.StateRunning, Init: true},
		}}
	if m.Started(&pod.Spec.InitContainers[1], "s1") {
		t.Fatal("sidecar started before its startup probe ran")
	}
	m.Sync(pod, st)
	if k := waitCall(t, s); k != Startup {
		t.Fatalf("probe %s, want Startup", k)
	}
	eventually(t, "sidecar started", func() bool { return m.Started(&pod.Spec.InitContainers[1], "s1") })
	m.mu.Lock()
	n := len(m.workers)
	m.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d workers, want only the sidecar's", n)
	}
}

// TestProbeMetrics: every probe run counts in prober_probe_total under the
// container's labels and its result, successes are timed, a restarted
// container's next instance carries the series on, and the series go with
// the pod's last worker.
func TestProbeMetrics(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &script{results: map[Kind][]Result{Readiness: {Success, Failure, Success, Success}}, calls: make(chan Kind, 10)}
	metrics := kubeletmetrics.New()
	m := NewWithRunner(s.run, clk, nil, nil, WithMetrics(metrics))
	defer m.Stop()
	c := corev1.Container{Name: "app", ReadinessProbe: &corev1.Probe{PeriodSeconds: 1}}
	pod, st := podWith(c)
	pod.Namespace, pod.Name = "ns", "web"
	m.Sync(pod, st)
	waitCall(t, s)
	for i := 0; i < 2; i++ {
		eventually(t, "worker waiting on its ticker", func() bool { return clk.HasWaiters() })
		clk.Step(time.Second)
		waitCall(t, s)
	}
	labels := func(result string) map[string]string {
		return map[string]string{"probe_type": "Readiness", "result": result, "container": "app", "pod": "web", "namespace": "ns", "pod_uid": "uid-1"}
	}
	gather := func() testenv.Metrics {
		got, err := testenv.GatherMetrics(metrics.Probes())
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// The counter moves before the histogram: wait for both, then check
	// the histogram did not time the failure.
	timed := func() uint64 {
		return gather().Count("prober_probe_duration_seconds", map[string]string{"pod": "web", "probe_type": "Readiness"})
	}
	eventually(t, "three runs counted, two timed", func() bool {
		g := gather()
		return g.Sum("prober_probe_total", labels("successful")) == 2 && g.Sum("prober_probe_total", labels("failed")) == 1 && timed() >= 2
	})
	if n := timed(); n != 2 {
		t.Errorf("timed %d runs, want the 2 successes", n)
	}
	// The container restarts: a new instance, the same series.
	st.Containers[0] = podruntime.ContainerStatus{ID: "c2", Name: "app", State: podruntime.StateRunning}
	m.Sync(pod, st)
	waitCall(t, s)
	eventually(t, "the new instance's run counted on the same series", func() bool {
		return gather().Sum("prober_probe_total", labels("successful")) == 3
	})
	m.Remove(pod.UID)
	eventually(t, "series dropped with the pod", func() bool { return gather()["prober_probe_total"] == nil })
}

// A warning (an HTTP probe redirected to another host) is a success that
// the kubelet reports with a ProbeWarning event, never an Unhealthy one.
func TestProbeWarningIsSuccessWithEvent(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &script{results: map[Kind][]Result{Liveness: {Warning, Warning}}, calls: make(chan Kind, 10)}
	rec := record.NewFakeRecorder(10)
	m := NewWithRunner(s.run, clk, nil, nil, WithRecorder(rec))
	defer m.Stop()
	c := corev1.Container{Name: "app", LivenessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1, SuccessThreshold: 1}}
	pod, st := podWith(c)
	spec := &pod.Spec.Containers[0]
	m.Sync(pod, st)
	for i := 0; i < 2; i++ {
		if k := waitCall(t, s); k != Liveness {
			t.Fatalf("probe %s, want Liveness", k)
		}
		if ev := <-rec.Events; ev != "Warning ProbeWarning Liveness probe warning: scripted" {
			t.Fatalf("event %d = %q", i, ev)
		}
		if _, _, failed := m.FailedProbe(spec, "c1"); failed {
			t.Fatal("a probe warning failed the container")
		}
		eventually(t, "worker waiting on its ticker", func() bool { return clk.HasWaiters() })
		clk.Step(time.Second)
	}
	if v, ok := m.verdict("c1", Liveness); !ok || v.result != Success {
		t.Fatalf("verdict %+v %v, want success", v, ok)
	}
}

// Readiness is probed as soon as the startup probe succeeds, not a whole
// readiness period later (the conformance suite's "should be ready
// immediately after startupProbe succeeds"): the fake clock never reaches
// the readiness worker's next tick.
func TestReadinessRunsWhenStartupSucceeds(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &script{results: map[Kind][]Result{Startup: {Failure, Success}, Readiness: {Success}}, calls: make(chan Kind, 10)}
	m := NewWithRunner(s.run, clk, nil, nil)
	defer m.Stop()
	c := corev1.Container{Name: "app",
		StartupProbe:   &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 10},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 30},
	}
	pod, st := podWith(c)
	spec := &pod.Spec.Containers[0]
	m.Sync(pod, st)
	if k := waitCall(t, s); k != Startup {
		t.Fatalf("first probe %s, want Startup", k)
	}
	// Both workers wait on their tickers; one startup period passes.
	eventually(t, "workers waiting", func() bool { return clk.Waiters() >= 2 })
	clk.Step(time.Second)
	eventually(t, "started", func() bool { return m.Started(spec, "c1") })
	eventually(t, "ready without the readiness period passing", func() bool { return m.Ready(spec, "c1") })
}

// A run that errored (the runtime failed the exec, the port does not
// resolve) is tried three times in the period, as the kubelet does, then
// reported once as "errored" and yields no verdict: a liveness probe with
// a failure threshold of 1 leaves the container alive, and no run counts.
func TestProbeErrorKeepsVerdict(t *testing.T) {
	calls := make(chan struct{}, 10)
	run := func(context.Context, *corev1.Probe, Target) (Result, string, error) {
		calls <- struct{}{}
		return Unknown, "", errors.New("boom")
	}
	rec := record.NewFakeRecorder(10)
	metrics := kubeletmetrics.New()
	m := NewWithRunner(run, clocktesting.NewFakeClock(time.Now()), nil, nil, WithRecorder(rec), WithMetrics(metrics))
	defer m.Stop()
	c := corev1.Container{Name: "app", LivenessProbe: &corev1.Probe{PeriodSeconds: 1, FailureThreshold: 1}}
	pod, st := podWith(c)
	m.Sync(pod, st)
	if ev := <-rec.Events; ev != "Warning Unhealthy Liveness probe errored and resulted in unknown state: boom" {
		t.Fatalf("event %q", ev)
	}
	if n := len(calls); n != 3 {
		t.Fatalf("%d runs in the period, want 3", n)
	}
	if _, _, failed := m.FailedProbe(&pod.Spec.Containers[0], "c1"); failed {
		t.Fatal("an errored run failed the container")
	}
	got, err := testenv.GatherMetrics(metrics.Probes())
	if err != nil {
		t.Fatal(err)
	}
	if got["prober_probe_total"] != nil {
		t.Fatalf("an errored run was counted: %v", got["prober_probe_total"])
	}
}

// TestProbeAfterAForwardJump: a liveness probe with a 30 s initial delay
// and a 10 s period. The clock jumping three days forward ends the initial
// delay and runs one probe, not one for each period the jump skipped (the
// fake ticker, like a real one, drops the ticks it missed); the probe then
// runs every period again. (A step back cannot be shown with the fake
// ticker, which then waits for the clock to catch up; the real ticker runs
// on the monotonic clock, which a step does not move.)
func TestProbeAfterAForwardJump(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	s := &script{results: map[Kind][]Result{}, calls: make(chan Kind, 10)}
	m := NewWithRunner(s.run, clk, nil, func(types.UID) {})
	defer m.Stop()
	c := corev1.Container{Name: "app", LivenessProbe: &corev1.Probe{InitialDelaySeconds: 30, PeriodSeconds: 10, FailureThreshold: 1000}}
	pod, st := podWith(c)
	m.Sync(pod, st)
	step := func(d time.Duration) {
		t.Helper()
		eventually(t, "worker waiting on its ticker", func() bool { return clk.HasWaiters() })
		clk.Step(d)
	}
	step(72 * time.Hour)
	if k := waitCall(t, s); k != Liveness {
		t.Fatalf("probe %s, want liveness", k)
	}
	eventually(t, "worker waiting on its ticker", func() bool { return clk.HasWaiters() })
	if n := len(s.calls); n != 0 {
		t.Fatalf("%d more probes right after the jump, want none until the next period", n)
	}
	step(10 * time.Second)
	waitCall(t, s)
}
