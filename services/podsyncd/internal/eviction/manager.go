package eviction

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/evictionapi"
	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/services/podsyncd/internal/events"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/resources"
)

// Defaults of the manager's timing.
const (
	// DefaultMonitoringPeriod is how often the kubelet synchronizes
	// (its evictionMonitoringPeriod, not configurable there).
	DefaultMonitoringPeriod = 10 * time.Second
	// podCleanupTimeout bounds the wait for an evicted pod to stop
	// before the next pass, the kubelet's value.
	podCleanupTimeout = 30 * time.Second
	// podCleanupPoll is how often that wait checks.
	podCleanupPoll = time.Second
)

// Config is the eviction policy.
type Config struct {
	// Thresholds are the hard and soft thresholds (evictionapi.Parse).
	Thresholds []evictionapi.Threshold
	// PressureTransitionPeriod keeps a pressure condition for this long
	// after its last threshold stopped being met.
	PressureTransitionPeriod time.Duration
	// MaxPodGracePeriodSeconds caps a pod's grace period when a soft
	// threshold evicts it.
	MaxPodGracePeriodSeconds int64
	// MonitoringPeriod is the time between passes (DefaultMonitoringPeriod).
	MonitoringPeriod time.Duration
	// LocalStorageCapacityIsolation evicts pods over their local storage
	// limits (emptyDir sizeLimit, ephemeral-storage limits) in every pass,
	// before the thresholds are acted on; the kubelet's default is on.
	LocalStorageCapacityIsolation bool
}

// Deps are what the manager measures and acts through.
type Deps struct {
	// Metrics counts the evictions by signal (kubelet_evictions); nil
	// counts nothing.
	Metrics *kubeletmetrics.Metrics
	// Summary returns the node's stats Summary (internal/stats).
	Summary func(ctx context.Context) (*statsapi.Summary, error)
	// DedicatedImageFs says whether the image filesystem is another
	// device than the nodefs; asked until it answers once.
	DedicatedImageFs func(ctx context.Context) (bool, error)
	// DeleteUnusedContainers and DeleteUnusedImages are the node-level
	// reclaim of disk signals (nil: none).
	DeleteUnusedContainers func(ctx context.Context) error
	DeleteUnusedImages     func(ctx context.Context) error
	// ActivePods are the admitted pods still running or starting and not
	// already being evicted.
	ActivePods func() []*corev1.Pod
	// Evict terminates pod with the grace period and makes its final
	// status Failed/Evicted with message and, when disruptionCondition is
	// set (threshold evictions, not local storage ones), a DisruptionTarget
	// condition.
	Evict func(pod *corev1.Pod, gracePeriod int64, message string, disruptionCondition bool)
	// PodCleanedUp says whether an evicted pod has stopped.
	PodCleanedUp func(uid types.UID) bool
	// Recorder takes the Evicted and EvictionThresholdMet events.
	Recorder events.Recorder
	// NodeName names the node in its events.
	NodeName string
	Clock    clock.Clock
	Log      *slog.Logger
}

// Pressure is the manager's judgement, what GetNodePressure serves.
type Pressure struct {
	// Synchronized is false until the first pass measured the node.
	Synchronized bool
	// Conditions are the pressure conditions that hold (met within the
	// transition period), sorted.
	Conditions []corev1.NodeConditionType
	// Signals are the signals whose thresholds are met now, ignoring
	// grace periods, sorted.
	Signals []evictionapi.Signal
}

// Has says whether a condition holds.
func (p Pressure) Has(c corev1.NodeConditionType) bool {
	for _, x := range p.Conditions {
		if x == c {
			return true
		}
	}
	return false
}

// Manager is the kubelet's eviction manager for podsyncd.
type Manager struct {
	cfg  Config
	deps Deps

	// set by the first pass that learns the filesystems' layout
	rankings  map[evictionapi.Signal]ranking
	dedicated bool

	mu                sync.RWMutex
	pressure          Pressure
	firstObservedAt   map[string]time.Time
	conditionObserved map[corev1.NodeConditionType]time.Time
	thresholdsMet     []evictionapi.Threshold
	lastObservations  observations
}

// New returns a manager; Run starts it.
func New(cfg Config, deps Deps) *Manager {
	if cfg.MonitoringPeriod <= 0 {
		cfg.MonitoringPeriod = DefaultMonitoringPeriod
	}
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	if deps.Log == nil {
		deps.Log = slog.Default()
	}
	return &Manager{cfg: cfg, deps: deps, firstObservedAt: map[string]time.Time{},
		conditionObserved: map[corev1.NodeConditionType]time.Time{}}
}

// Pressure returns the latest judgement.
func (m *Manager) Pressure() Pressure {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.pressure
}

// enabled says whether a pass has anything to do: thresholds to judge or
// local storage limits to enforce.
func (m *Manager) enabled() bool {
	return len(m.cfg.Thresholds) > 0 || m.cfg.LocalStorageCapacityIsolation
}

// Run synchronizes every MonitoringPeriod until ctx ends; after an
// eviction it first waits (at most 30 s) for the pods to stop, as the
// kubelet does, so one pressure episode does not evict a pod per period
// while the first is still dying.
func (m *Manager) Run(ctx context.Context) {
	if !m.enabled() {
		m.deps.Log.Info("eviction manager off: no thresholds and no local storage capacity isolation")
		m.mu.Lock()
		m.pressure.Synchronized = true
		m.mu.Unlock()
		return
	}
	for {
		pods, err := m.Synchronize(ctx)
		if err != nil && ctx.Err() == nil {
			m.deps.Log.Warn("eviction manager: pass failed", "err", err)
		}
		if len(pods) > 0 {
			m.waitForCleanup(ctx, pods)
		} else {
			select {
			case <-ctx.Done():
			case <-m.deps.Clock.After(m.cfg.MonitoringPeriod):
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

func (m *Manager) waitForCleanup(ctx context.Context, pods []*corev1.Pod) {
	if m.deps.PodCleanedUp == nil {
		return
	}
	deadline := m.deps.Clock.Now().Add(podCleanupTimeout)
	for _, pod := range pods {
		for !m.deps.PodCleanedUp(pod.UID) {
			if !m.deps.Clock.Now().Before(deadline) {
				m.deps.Log.Warn("eviction manager: timed out waiting for the evicted pod to stop", "pod", pod.Namespace+"/"+pod.Name)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-m.deps.Clock.After(podCleanupPoll):
			}
		}
		m.deps.Log.Info("eviction manager: evicted pod stopped", "pod", pod.Namespace+"/"+pod.Name)
	}
}

// key identifies a threshold across passes.
func key(t evictionapi.Threshold) string { return t.String() }

// Synchronize is one pass of the kubelet's synchronize: measure, judge the
// thresholds (minimum reclaim, grace periods, transition period), evict
// the pods over their local storage limits (and stop there if any was),
// and when a threshold whose grace period has passed is met, reclaim
// node-level resources first (dead containers, unused images, for disk
// signals) and otherwise evict the first-ranked pod. It returns the
// evicted pods.
func (m *Manager) Synchronize(ctx context.Context) ([]*corev1.Pod, error) {
	if !m.enabled() {
		return nil, nil
	}
	if m.rankings == nil {
		dedicated := false
		if m.deps.DedicatedImageFs != nil {
			d, err := m.deps.DedicatedImageFs(ctx)
			if err != nil {
				return nil, err
			}
			dedicated = d
		}
		m.dedicated, m.rankings = dedicated, rankings(dedicated)
	}
	var active []*corev1.Pod
	if m.deps.ActivePods != nil {
		active = m.deps.ActivePods()
	}
	summary, err := m.deps.Summary(ctx)
	if err != nil {
		return nil, err
	}
	obs, stats := observe(summary)

	met := thresholdsMet(m.cfg.Thresholds, obs, false)
	now := m.deps.Clock.Now()
	m.mu.Lock()
	if len(m.thresholdsMet) > 0 {
		// Thresholds that evicted stay met until their minimum reclaim
		// is available again.
		met = mergeThresholds(met, thresholdsMet(m.thresholdsMet, obs, true))
	}
	// The times below are the manager's own clock readings; the real
	// clock's monotonic part keeps them apart from wall-clock steps. One
	// that reads after now (a clock without a monotonic reading, stepped
	// back) counts as now: the grace and transition periods run from the
	// step instead of for as long as the clock went back.
	first := make(map[string]time.Time, len(met))
	for _, t := range met {
		if at, ok := m.firstObservedAt[key(t)]; ok && !at.After(now) {
			first[key(t)] = at
		} else {
			first[key(t)] = now
		}
	}
	for _, t := range met {
		m.conditionObserved[t.Signal.Condition()] = now
	}
	var conds []corev1.NodeConditionType
	for c, at := range m.conditionObserved {
		if at.After(now) {
			m.conditionObserved[c], at = now, now
		}
		if now.Sub(at) < m.cfg.PressureTransitionPeriod {
			conds = append(conds, c)
		} else {
			delete(m.conditionObserved, c)
		}
	}
	sort.Slice(conds, func(i, j int) bool { return conds[i] < conds[j] })
	var graceMet []evictionapi.Threshold
	for _, t := range met {
		if now.Sub(first[key(t)]) >= t.GracePeriod {
			graceMet = append(graceMet, t)
		}
	}
	signals := make([]evictionapi.Signal, 0, len(met))
	for _, t := range met {
		if !containsSignal(signals, t.Signal) {
			signals = append(signals, t.Signal)
		}
	}
	sort.Slice(signals, func(i, j int) bool { return signals[i] < signals[j] })
	m.firstObservedAt = first
	m.thresholdsMet = graceMet
	// Only thresholds whose signal was measured anew since the last pass
	// act, so one stale reading does not evict twice. Anew is a different
	// time, not a later one (the kubelet's): the stats are dated by the
	// wall clock, and after a step back every new reading is earlier than
	// the last; eviction would stand still until the clock caught up.
	updated := graceMet[:0:0]
	for _, t := range graceMet {
		o := obs[t.Signal]
		last, ok := m.lastObservations[t.Signal]
		if !ok || o.time.IsZero() || !o.time.Equal(last.time) {
			updated = append(updated, t)
		}
	}
	m.lastObservations = obs
	m.pressure = Pressure{Synchronized: true, Conditions: conds, Signals: signals}
	m.mu.Unlock()

	if m.cfg.LocalStorageCapacityIsolation {
		if evicted := m.localStorageEviction(active, stats, m.deps.Log); len(evicted) > 0 {
			return evicted, nil
		}
	}
	if len(updated) == 0 {
		return nil, nil
	}
	// Memory first, as the kubelet's byEvictionPriority.
	sort.SliceStable(updated, func(i, j int) bool {
		return updated[i].Signal == evictionapi.SignalMemoryAvailable && updated[j].Signal != evictionapi.SignalMemoryAvailable
	})
	t := updated[0]
	res := t.Signal.Resource()
	log := m.deps.Log.With("resourceName", res, "threshold", t.String())
	log.Info("eviction manager: attempting to reclaim")
	m.event(&corev1.ObjectReference{Kind: "Node", Name: m.deps.NodeName, UID: types.UID(m.deps.NodeName)}, nil,
		"EvictionThresholdMet", "Attempting to reclaim "+string(res))
	if m.reclaimNodeLevel(ctx, t.Signal, log) {
		log.Info("eviction manager: able to reduce resource pressure without evicting pods")
		return nil, nil
	}
	log.Info("eviction manager: must evict pod(s) to reclaim")
	if len(active) == 0 {
		log.Error("eviction manager: eviction thresholds have been met, but no pods are active to evict")
		return nil, nil
	}
	for _, pod := range rank(active, stats, m.rankings[t.Signal]) {
		grace := int64(immediateGracePeriod)
		if !t.Hard() {
			grace = m.cfg.MaxPodGracePeriodSeconds
			if tg := pod.Spec.TerminationGracePeriodSeconds; tg != nil {
				grace = min(grace, *tg)
			}
		}
		msg, ann := message(res, pod, stats, updated, obs)
		if m.evict(pod, grace, msg, ann, true, log) {
			m.deps.Metrics.Evicted(string(t.Signal))
			return []*corev1.Pod{pod}, nil
		}
	}
	log.Info("eviction manager: unable to evict any pods from the node")
	return nil, nil
}

func containsSignal(ss []evictionapi.Signal, s evictionapi.Signal) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// reclaimNodeLevel runs the node-level reclaim of a disk signal — dead
// containers of every pod that is gone or finished, then unused images —
// and says whether, measured again, no threshold is met any more (minimum
// reclaim included). With a dedicated image filesystem only imagefs
// signals reclaim this way: the images are not on the nodefs.
func (m *Manager) reclaimNodeLevel(ctx context.Context, s evictionapi.Signal, log *slog.Logger) bool {
	var funcs []func(context.Context) error
	switch s {
	case evictionapi.SignalImageFsAvailable, evictionapi.SignalImageFsInodesFree:
		funcs = append(funcs, m.deps.DeleteUnusedContainers, m.deps.DeleteUnusedImages)
	case evictionapi.SignalNodeFsAvailable, evictionapi.SignalNodeFsInodesFree:
		if !m.dedicated {
			funcs = append(funcs, m.deps.DeleteUnusedContainers, m.deps.DeleteUnusedImages)
		}
	}
	ran := false
	for _, f := range funcs {
		if f == nil {
			continue
		}
		ran = true
		if err := f(ctx); err != nil {
			log.Info("eviction manager: unexpected error when attempting to reduce resource pressure", "err", err)
		}
	}
	if !ran {
		return false
	}
	summary, err := m.deps.Summary(ctx)
	if err != nil {
		log.Error("eviction manager: failed to get summary stats after resource reclaim", "err", err)
		return false
	}
	obs, _ := observe(summary)
	return len(thresholdsMet(m.cfg.Thresholds, obs, true)) == 0
}

func (m *Manager) evict(pod *corev1.Pod, grace int64, msg string, ann map[string]string, condition bool, log *slog.Logger) bool {
	if podutil.IsCritical(pod) {
		log.Error("eviction manager: cannot evict a critical pod", "pod", pod.Namespace+"/"+pod.Name)
		return false
	}
	m.event(pod, ann, Reason, msg)
	log.Info("eviction manager: evicting pod", "pod", pod.Namespace+"/"+pod.Name, "gracePeriod", grace, "message", msg)
	if m.deps.Evict != nil {
		m.deps.Evict(pod, grace, msg, condition)
	}
	return true
}

func (m *Manager) event(obj runtime.Object, ann map[string]string, reason, msg string) {
	if m.deps.Recorder == nil {
		return
	}
	m.deps.Recorder.AnnotatedEventf(obj, ann, corev1.EventTypeWarning, reason, "%s", msg)
}

// Admit is the kubelet's eviction admission handler: with no pressure every
// pod is admitted, and critical pods always are; under memory pressure
// alone only BestEffort pods are refused, unless they tolerate the
// memory-pressure taint; under disk or PID pressure every pod is refused.
// A refusal has reason Evicted and the kubelet's message.
func (m *Manager) Admit(pod *corev1.Pod) (ok bool, reason, message string) {
	p := m.Pressure()
	if len(p.Conditions) == 0 || podutil.IsCritical(pod) {
		return true, "", ""
	}
	if len(p.Conditions) == 1 && p.Conditions[0] == corev1.NodeMemoryPressure {
		if resources.QOSClass(pod) != corev1.PodQOSBestEffort {
			return true, "", ""
		}
		taint := &corev1.Taint{Key: corev1.TaintNodeMemoryPressure, Effect: corev1.TaintEffectNoSchedule}
		if corev1helpers.TolerationsTolerateTaint(klog.Background(), pod.Spec.Tolerations, taint, false) {
			return true, "", ""
		}
	}
	return false, Reason, AdmissionMessage(p.Conditions)
}
