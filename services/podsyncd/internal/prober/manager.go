package prober

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/services/podsyncd/internal/criexec"
	"github.com/microlet/microlet/services/podsyncd/internal/events"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// Kind is which of a container's probes a worker runs.
type Kind string

// The three probe kinds.
const (
	Liveness  Kind = "Liveness"
	Readiness Kind = "Readiness"
	Startup   Kind = "Startup"
)

// RunFunc runs one probe once; Run is the real one, tests inject others.
type RunFunc func(ctx context.Context, p *corev1.Probe, t Target) (Result, string, error)

// maxRetries is how often a run that errored is tried again in the same
// period before the error is reported, as the kubelet does.
const maxRetries = 3

// Manager owns the probe workers of every pod on the node.
type Manager struct {
	log      *slog.Logger
	run      RunFunc
	clock    clock.WithTicker
	onChange func(types.UID)

	// rec and metrics are set by New's options and never change.
	rec     events.Recorder
	metrics *kubeletmetrics.Metrics

	mu      sync.Mutex
	workers map[key]*worker
	// results hold each worker's verdict by container ID and kind.
	results map[string]map[Kind]verdict
}

type key struct {
	uid         types.UID
	containerID string
	kind        Kind
}

type verdict struct {
	result  Result
	message string
}

// Option sets an optional part of a Manager at construction.
type Option func(*Manager)

// WithRecorder makes failed probes record upstream's Unhealthy events
// ("Liveness probe failed: ...") instead of only logging them.
func WithRecorder(rec events.Recorder) Option { return func(m *Manager) { m.rec = rec } }

// WithMetrics counts every probe run in the prober's metrics
// (prober_probe_total, prober_probe_duration_seconds); a worker's series
// go when it stops.
func WithMetrics(metrics *kubeletmetrics.Metrics) Option {
	return func(m *Manager) { m.metrics = metrics }
}

// New returns a manager probing through the CRI client rt; onChange is
// called (from a worker goroutine) when a verdict changes so that the pod is
// synced and its status reported.
func New(rt criexec.Execer, log *slog.Logger, onChange func(types.UID), opts ...Option) *Manager {
	return NewWithRunner(func(ctx context.Context, p *corev1.Probe, t Target) (Result, string, error) {
		return Run(ctx, rt, p, t)
	}, clock.RealClock{}, log, onChange, opts...)
}

// NewWithRunner is New with the probe execution and clock injected.
func NewWithRunner(run RunFunc, clk clock.WithTicker, log *slog.Logger, onChange func(types.UID), opts ...Option) *Manager {
	if onChange == nil {
		onChange = func(types.UID) {}
	}
	m := &Manager{log: log, run: run, clock: clk, onChange: onChange, workers: map[key]*worker{}, results: map[string]map[Kind]verdict{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// dropSeries deletes the series of a worker that ended, unless a live
// worker probes the same pod, container name and kind (the next instance
// of a restarted container carries the series on, as upstream's one
// worker per container name does).
func (m *Manager) dropSeries(w *worker) {
	tg := w.snapshot()
	m.mu.Lock()
	for k, o := range m.workers {
		if o != w && k.uid == w.key.uid && k.kind == w.key.kind && o.probeName() == tg.Container.Name {
			m.mu.Unlock()
			return
		}
	}
	m.mu.Unlock()
	m.metrics.ProbeStopped(w.metricTarget(tg))
}

// Sync starts workers for the probes of every running container of the pod
// and stops the workers of container instances that are no longer running.
func (m *Manager) Sync(pod *corev1.Pod, st *podruntime.PodStatus) {
	podIP := ""
	if sb := st.ReadySandbox(); sb != nil {
		podIP = sb.IP
	}
	want := map[key]*corev1.Probe{}
	containers := map[string]*corev1.Container{}
	// Regular containers and restartable init containers (sidecars) are
	// probed, as upstream's prober manager does; other init containers are not.
	var specs []*corev1.Container
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; podutil.IsSidecar(c) {
			specs = append(specs, c)
		}
	}
	for i := range pod.Spec.Containers {
		specs = append(specs, &pod.Spec.Containers[i])
	}
	for _, c := range specs {
		cs := st.Latest(c.Name)
		if cs == nil || cs.State != podruntime.StateRunning {
			continue
		}
		containers[cs.ID] = c
		for kind, p := range map[Kind]*corev1.Probe{Liveness: c.LivenessProbe, Readiness: c.ReadinessProbe, Startup: c.StartupProbe} {
			if p != nil {
				want[key{pod.UID, cs.ID, kind}] = p
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		if k.uid != pod.UID {
			continue
		}
		if _, ok := want[k]; !ok {
			w.stop()
			delete(m.workers, k)
			delete(m.results, k.containerID)
		}
	}
	for k, p := range want {
		if w, ok := m.workers[k]; ok {
			w.setPod(pod, podIP)
			continue
		}
		w := &worker{m: m, key: k, probe: p, target: Target{Pod: pod, Container: containers[k.containerID], ContainerID: k.containerID, PodIP: podIP}, done: make(chan struct{}), trigger: make(chan struct{}, 1)}
		m.workers[k] = w
		go w.loop()
	}
}

// Remove stops every worker of a pod.
func (m *Manager) Remove(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		if k.uid == uid {
			w.stop()
			delete(m.workers, k)
			delete(m.results, k.containerID)
		}
	}
}

// Stop stops every worker (on shutdown).
func (m *Manager) Stop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, w := range m.workers {
		w.stop()
		delete(m.workers, k)
	}
}

func (m *Manager) verdict(id string, kind Kind) (verdict, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.results[id][kind]
	return v, ok
}

// Started says whether a running container counts as started: true unless it
// has a startup probe that has not succeeded yet.
func (m *Manager) Started(c *corev1.Container, id string) bool {
	if c.StartupProbe == nil {
		return true
	}
	v, _ := m.verdict(id, Startup)
	return v.result == Success
}

// Ready says whether a running container is ready: started, and its
// readiness probe (if any) has succeeded.
func (m *Manager) Ready(c *corev1.Container, id string) bool {
	if !m.Started(c, id) {
		return false
	}
	if c.ReadinessProbe == nil {
		return true
	}
	v, _ := m.verdict(id, Readiness)
	return v.result == Success
}

// FailedProbe says whether the container must be killed: its liveness or
// startup probe crossed its failure threshold. probe is "liveness" or
// "startup", as the kubelet names it in the kill message ("Container app
// failed liveness probe"); grace is that probe's own termination grace
// period, nil for the pod's.
func (m *Manager) FailedProbe(c *corev1.Container, id string) (probe string, grace *int64, failed bool) {
	if v, ok := m.verdict(id, Liveness); ok && v.result == Failure && c.LivenessProbe != nil {
		return "liveness", c.LivenessProbe.TerminationGracePeriodSeconds, true
	}
	if v, ok := m.verdict(id, Startup); ok && v.result == Failure && c.StartupProbe != nil {
		return "startup", c.StartupProbe.TerminationGracePeriodSeconds, true
	}
	return "", nil, false
}

func (m *Manager) set(k key, v verdict) {
	m.mu.Lock()
	if _, live := m.workers[k]; !live {
		m.mu.Unlock()
		return
	}
	if m.results[k.containerID] == nil {
		m.results[k.containerID] = map[Kind]verdict{}
	}
	old, had := m.results[k.containerID][k.kind]
	m.results[k.containerID][k.kind] = v
	if k.kind == Startup && v.result == Success && (!had || old.result != Success) {
		// The container just started: probe readiness now, not at the
		// readiness worker's next tick a whole period later (the kubelet
		// triggers it when it finds a started container not yet ready).
		if rw, ok := m.workers[key{uid: k.uid, containerID: k.containerID, kind: Readiness}]; ok {
			select {
			case rw.trigger <- struct{}{}:
			default:
			}
		}
	}
	m.mu.Unlock()
	if !had || old.result != v.result {
		m.onChange(k.uid)
	}
}

// worker probes one container instance for one kind of probe.
type worker struct {
	m     *Manager
	key   key
	probe *corev1.Probe

	mu     sync.Mutex
	target Target

	once sync.Once
	done chan struct{}
	// trigger asks for a run before the next tick (buffered, one pending).
	trigger chan struct{}
}

// probeName is the name of the container the worker probes.
func (w *worker) probeName() string { return w.snapshot().Container.Name }

func (w *worker) stop() { w.once.Do(func() { close(w.done) }) }

func (w *worker) setPod(pod *corev1.Pod, podIP string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.target.Pod = pod
	if podIP != "" {
		w.target.PodIP = podIP
	}
}

func (w *worker) snapshot() Target {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.target
}

// metricTarget is the worker's labels in the prober's metrics.
func (w *worker) metricTarget(tg Target) kubeletmetrics.ProbeTarget {
	return kubeletmetrics.ProbeTarget{Kind: string(w.key.kind), Namespace: tg.Pod.Namespace, Pod: tg.Pod.Name,
		PodUID: string(tg.Pod.UID), Container: tg.Container.Name}
}

// resultLabel is prober_probe_total's result label of r.
func resultLabel(r Result) string {
	switch r {
	case Success:
		return kubeletmetrics.ProbeSuccessful
	case Failure:
		return kubeletmetrics.ProbeFailed
	}
	return kubeletmetrics.ProbeUnknown
}

func (w *worker) loop() {
	p := w.probe
	period := time.Duration(p.PeriodSeconds) * time.Second
	if period <= 0 {
		period = 10 * time.Second
	}
	success, failure := int(p.SuccessThreshold), int(p.FailureThreshold)
	if success <= 0 {
		success = 1
	}
	if failure <= 0 {
		failure = 3
	}
	// Before any verdict: not ready, alive, not started (upstream's initial values).
	switch w.key.kind {
	case Readiness:
		w.m.set(w.key, verdict{result: Failure})
	case Liveness:
		w.m.set(w.key, verdict{result: Success})
	}
	start := w.m.clock.Now()
	initial := time.Duration(p.InitialDelaySeconds) * time.Second
	last, run := Unknown, 0
	defer w.m.dropSeries(w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-w.done; cancel() }()
	t := w.m.clock.NewTicker(period)
	defer t.Stop()
	for {
		if w.probeOnce(ctx, start, initial, success, failure, &last, &run) {
			return
		}
		select {
		case <-w.done:
			return
		case <-t.C():
		case <-w.trigger:
		}
	}
}

// record records a Warning event about the probed container, or logs it
// when there is no recorder.
func (w *worker) record(tg Target, reason, format string, args ...any) {
	if rec := w.m.rec; rec != nil {
		rec.Eventf(events.ContainerRef(tg.Pod, tg.Container), corev1.EventTypeWarning, reason, format, args...)
	} else if w.m.log != nil {
		w.m.log.Info("probe "+reason, "pod", tg.Pod.Namespace+"/"+tg.Pod.Name, "container", tg.Container.Name, "message", fmt.Sprintf(format, args...))
	}
}

// probeOnce runs one probe period; true ends the worker.
func (w *worker) probeOnce(ctx context.Context, start time.Time, initial time.Duration, success, failure int, last *Result, run *int) bool {
	tg := w.snapshot()
	if w.key.kind != Startup && !w.m.Started(tg.Container, tg.ContainerID) {
		return false // startup gates the other probes
	}
	if w.key.kind == Startup {
		if v, ok := w.m.verdict(tg.ContainerID, Startup); ok && v.result == Success {
			return true // a startup probe is done once it succeeded
		}
	}
	if w.m.clock.Since(start) < initial {
		return false
	}
	began := w.m.clock.Now()
	var (
		res Result
		msg string
		err error
	)
	for range maxRetries {
		if res, msg, err = w.m.run(ctx, w.probe, tg); err == nil || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return true
	}
	if err != nil {
		// The probe could not be run: the kubelet reports it and keeps the
		// last verdict.
		w.record(tg, events.Unhealthy, "%s probe errored and resulted in %s state: %s", w.key.kind, res, err)
		return false
	}
	switch res {
	case Warning:
		// A success the kubelet reports as a Warning event of its own.
		w.record(tg, events.ProbeWarning, "%s probe warning: %s", w.key.kind, msg)
		res = Success
	case Failure:
		w.record(tg, events.Unhealthy, "%s probe failed: %s", w.key.kind, msg)
	case Unknown:
		res = Failure // an unjudged run without an error counts as a failure, unreported
	}
	w.m.metrics.Probed(w.metricTarget(tg), resultLabel(res), w.m.clock.Since(began))
	if res == *last {
		*run++
	} else {
		*last, *run = res, 1
	}
	if (res == Success && *run < success) || (res == Failure && *run < failure) {
		return false
	}
	w.m.set(w.key, verdict{result: res, message: msg})
	// A container that failed liveness or startup will be killed; stop here
	// so it is not probed (and reported) again while it stops.
	return res == Failure && w.key.kind != Readiness
}
