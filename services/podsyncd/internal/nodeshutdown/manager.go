package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/statefile"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// The kubelet's reasons and messages, kept word for word because tools key
// on them.
const (
	// ReasonTerminated and MessageTerminated go on a pod killed for the
	// shutdown (status reason/message and its DisruptionTarget condition).
	ReasonTerminated  = "Terminated"
	MessageTerminated = "Pod was terminated in response to imminent node shutdown."
	// ReasonNotAdmitted and MessageNotAdmitted refuse a pod while the node
	// shuts down.
	ReasonNotAdmitted  = "NodeShutdown"
	MessageNotAdmitted = "Pod was rejected as the node is shutting down."
	// NotReadyMessage is the node's Ready condition's message meanwhile.
	NotReadyMessage = "node is shutting down"
	// EventReason is the reason of the Node events about shutdowns.
	EventReason = "NodeShutdown"
)

// Pods is what the manager needs of the sync loop.
type Pods interface {
	// ActivePods are the admitted pods that have not finished.
	ActivePods() []*corev1.Pod
	// KillPod stops pod within grace seconds, with the final status Failed
	// (unless it Succeeded), ReasonTerminated, MessageTerminated and a
	// DisruptionTarget condition (reason TerminationByKubelet). The channel
	// is closed once none of its containers runs.
	KillPod(pod *corev1.Pod, grace int64) <-chan struct{}
}

// Manager watches logind for shutdowns and stops the pods first.
type Manager struct {
	periods []GracePeriodByPriority
	log     *slog.Logger
	o       options

	mu           sync.Mutex
	shuttingDown bool
}

type options struct {
	bus      string
	dropIn   string
	clock    clock.Clock
	recorder record.EventRecorder
	nodeName string
	ready    func(errs []string)
	retry    wait.Backoff
	stateDir string
	metrics  *kubeletmetrics.Metrics
}

// Option tunes New.
type Option func(*options)

// WithBusAddress names the system bus ("" is the default system bus).
func WithBusAddress(addr string) Option { return func(o *options) { o.bus = addr } }

// WithDropIn sets the path of the logind drop-in written when logind's
// InhibitDelayMaxSec is below the grace periods' sum (DefaultDropIn).
func WithDropIn(path string) Option { return func(o *options) { o.dropIn = path } }

// WithClock replaces the clock of the groups' timers.
func WithClock(c clock.Clock) Option { return func(o *options) { o.clock = c } }

// WithRecorder records the kubelet's NodeShutdown events on the Node.
func WithRecorder(r record.EventRecorder, nodeName string) Option {
	return func(o *options) { o.recorder, o.nodeName = r, nodeName }
}

// WithReadyErrors is told the node's readiness errors whenever they
// change: [NotReadyMessage] while shutting down, none otherwise.
func WithReadyErrors(f func(errs []string)) Option { return func(o *options) { o.ready = f } }

// WithState keeps the last shutdown's times in dir/graceful_node_shutdown_state
// and reports them as kubelet_graceful_shutdown_{start,end}_time_seconds in
// metrics, restored from the file at start-up as the kubelet does.
func WithState(dir string, metrics *kubeletmetrics.Metrics) Option {
	return func(o *options) { o.stateDir, o.metrics = dir, metrics }
}

// WithRetry sets the backoff between attempts to reach logind.
func WithRetry(b wait.Backoff) Option { return func(o *options) { o.retry = b } }

// New returns a manager for cfg (validated by the caller); WithBusAddress
// and WithDropIn override cfg's.
func New(cfg Config, log *slog.Logger, opts ...Option) *Manager {
	dropIn := cfg.LogindDropIn
	if dropIn == "" {
		dropIn = DefaultDropIn
	}
	o := options{
		bus:    cfg.SystemBusAddress,
		dropIn: dropIn,
		clock:  clock.RealClock{},
		retry:  wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: 2 * time.Minute},
	}
	for _, f := range opts {
		f(&o)
	}
	return &Manager{periods: cfg.Periods(), log: log, o: o}
}

// Enabled reports whether a grace period is configured.
func (m *Manager) Enabled() bool { return len(m.periods) > 0 }

// ShuttingDown reports whether logind announced a shutdown that was not
// cancelled since.
func (m *Manager) ShuttingDown() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.shuttingDown
}

// Admit refuses every new pod while the node shuts down, with the kubelet's
// reason and message.
func (m *Manager) Admit() (ok bool, reason, message string) {
	if m.ShuttingDown() {
		return false, ReasonNotAdmitted, MessageNotAdmitted
	}
	return true, "", ""
}

// Run keeps a session with logind until ctx ends; pods are the ones a
// shutdown stops. Without logind (no system
// bus, as in a container) it logs one warning, keeps retrying with backoff
// and the node runs as without graceful shutdown.
func (m *Manager) Run(ctx context.Context, pods Pods) {
	if !m.Enabled() {
		m.log.Info("graceful node shutdown is off (shutdown_grace_period and shutdown_grace_period_by_pod_priority are unset)")
		return
	}
	m.restoreMetrics()
	delay := m.o.retry.DelayFunc()
	failing := false
	for {
		armed, err := m.session(ctx, pods)
		if ctx.Err() != nil {
			return
		}
		if armed {
			// A session ran: a new failure is news, and the backoff starts over.
			failing = false
			delay = m.o.retry.DelayFunc()
		}
		switch {
		case err != nil && !failing:
			m.log.Warn("graceful node shutdown unavailable: logind cannot be used over the system bus, so pods will not be stopped before a shutdown; retrying with backoff",
				"bus", m.busName(), "err", err)
			failing = true
		case err != nil:
			m.log.Debug("logind still unavailable", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay()):
		}
	}
}

func (m *Manager) busName() string {
	if m.o.bus == "" {
		return "system bus"
	}
	return m.o.bus
}

// session connects, makes sure logind allows the delay, takes the lock and
// handles PrepareForShutdown until the connection or ctx ends. armed says
// the lock was held at some point.
func (m *Manager) session(ctx context.Context, pods Pods) (armed bool, err error) {
	lg, err := DialLogind(m.o.bus)
	if err != nil {
		return false, err
	}
	defer lg.Close()
	if err := m.ensureDelay(lg); err != nil {
		return false, err
	}
	// Subscribe before taking the lock: a shutdown announced in between
	// would otherwise find the lock held and nobody listening.
	events, err := lg.Watch()
	if err != nil {
		return false, err
	}
	lock, err := lg.Inhibit()
	if err != nil {
		return false, err
	}
	defer func() { _ = lock.Release() }()
	m.log.Info("graceful node shutdown armed: holding a logind delay lock", "bus", m.busName(), "groups", len(m.periods), "delay", Requested(m.periods))
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case shutdown, ok := <-events:
			if !ok {
				return true, errors.New("the system bus connection ended")
			}
			m.setShuttingDown(shutdown)
			if shutdown {
				m.event("Shutdown manager detected shutdown event")
				m.log.Info("node shutdown announced by logind: stopping pods by priority")
				m.recordShutdown(func() { m.killPods(pods) })
				if err := lock.Release(); err != nil {
					m.log.Warn("could not release the logind lock", "err", err)
				}
				lock = -1
				m.log.Info("pods stopped; logind lock released, the node will shut down shortly")
				continue
			}
			m.event("Shutdown manager detected shutdown cancellation")
			m.log.Info("node shutdown cancelled: taking the logind lock again")
			nl, err := lg.Inhibit()
			if err != nil {
				return true, err
			}
			_ = lock.Release()
			lock = nl
		}
	}
}

// ensureDelay raises logind's InhibitDelayMaxSec with a drop-in when it is
// below what the grace periods need, and waits for logind to reload it.
func (m *Manager) ensureDelay(lg *Logind) error {
	cur, err := lg.InhibitDelayMax()
	if err != nil {
		return err
	}
	need := Requested(m.periods)
	if need <= cur {
		return nil
	}
	if err := WriteDropIn(m.o.dropIn, need); err != nil {
		return err
	}
	if err := lg.ReloadLogind(); err != nil {
		return err
	}
	// The reload is asynchronous: look again a few times, as the kubelet does.
	attempts := 0
	err = wait.ExponentialBackoff(wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: 5}, func() (bool, error) {
		attempts++
		cur, err = lg.InhibitDelayMax()
		return err == nil && cur >= need, err
	})
	if err != nil {
		return fmt.Errorf("logind's InhibitDelayMaxSec is %s after writing %s and %d looks, below the %s the grace periods need: %w",
			cur, m.o.dropIn, attempts, need, err)
	}
	m.log.Info("raised logind's InhibitDelayMaxSec", "dropIn", m.o.dropIn, "delay", need)
	return nil
}

// restoreMetrics sets the shutdown gauges from the state file; one that
// does not decode is moved aside (the gauges stay 0 until the next
// shutdown records one).
func (m *Manager) restoreMetrics() {
	if m.o.stateDir == "" {
		return
	}
	path := filepath.Join(m.o.stateDir, StateFile)
	st, err := LoadState(path)
	if errors.Is(err, ErrCorruptState) {
		if _, qerr := statefile.Quarantine(m.log, path, err); qerr != nil {
			m.log.Warn("could not move the corrupt graceful shutdown state aside", "err", qerr)
		}
		return
	}
	if err != nil {
		m.log.Warn("could not load the graceful shutdown state", "err", err)
		return
	}
	m.o.metrics.SetShutdownTimes(st.StartTime, st.EndTime)
}

// recordShutdown runs kill between storing the shutdown's start and its
// end, with the gauges following (end 0 while it runs).
func (m *Manager) recordShutdown(kill func()) {
	if m.o.stateDir == "" {
		kill()
		return
	}
	path := filepath.Join(m.o.stateDir, StateFile)
	st := State{StartTime: m.o.clock.Now()}
	if err := StoreState(path, st); err != nil {
		m.log.Warn("could not store the graceful shutdown state", "err", err)
	}
	m.o.metrics.SetShutdownTimes(st.StartTime, time.Time{})
	kill()
	st.EndTime = m.o.clock.Now()
	if err := StoreState(path, st); err != nil {
		m.log.Warn("could not store the graceful shutdown state", "err", err)
	}
	m.o.metrics.SetShutdownTimes(st.StartTime, st.EndTime)
}

func (m *Manager) setShuttingDown(v bool) {
	m.mu.Lock()
	m.shuttingDown = v
	m.mu.Unlock()
	if m.o.ready == nil {
		return
	}
	if v {
		m.o.ready([]string{NotReadyMessage})
	} else {
		m.o.ready(nil)
	}
}

func (m *Manager) event(msg string) {
	if m.o.recorder == nil || m.o.nodeName == "" {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: m.o.nodeName, UID: types.UID(m.o.nodeName)}
	m.o.recorder.Event(ref, corev1.EventTypeNormal, EventReason, msg)
}

// killPods stops the active pods group by group, lowest priority first; a
// group's pods are stopped together, and the next group starts when they
// all stopped or the group's grace period ran out (the kubelet's killPods).
func (m *Manager) killPods(pods Pods) {
	for _, g := range GroupByPriority(m.periods, pods.ActivePods()) {
		if len(g.Pods) == 0 {
			continue
		}
		dones := make([]<-chan struct{}, 0, len(g.Pods))
		for _, pod := range g.Pods {
			grace := graceFor(g, pod)
			m.log.Info("shutdown: killing pod", "pod", pod.Namespace+"/"+pod.Name, "priority", g.Priority, "gracePeriod", grace)
			dones = append(dones, pods.KillPod(pod, grace))
		}
		all := make(chan struct{})
		go func() {
			for _, d := range dones {
				<-d
			}
			close(all)
		}()
		timer := m.o.clock.NewTimer(time.Duration(g.ShutdownGracePeriodSeconds) * time.Second)
		select {
		case <-all:
			timer.Stop()
			m.log.Info("shutdown: group stopped", "priority", g.Priority, "pods", len(g.Pods))
		case <-timer.C():
			m.log.Warn("shutdown: group's grace period ran out before all its pods stopped", "priority", g.Priority, "gracePeriod", g.ShutdownGracePeriodSeconds)
		}
	}
}
