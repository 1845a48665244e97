package kubeletmetrics

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podutil"
)

// StartupTracker measures the pod start SLI as the kubelet's pod startup
// latency tracker does: from a pod's creation to the moment a watch
// delivered it with every container running, after the sync loop had
// reported that status; minus the time its images were pulling and its
// init containers ran, into kubelet_pod_start_sli_duration_seconds
// (stateless pods only), and without the subtraction into
// kubelet_pod_start_total_duration_seconds. Static pods are not tracked,
// nor pods that were unschedulable. Methods are safe on nil.
type StartupTracker struct {
	m     *Metrics
	clock clock.PassiveClock

	mu       sync.Mutex
	pods     map[types.UID]*podStartup
	excluded map[types.UID]bool
}

type podStartup struct {
	pullStarts      []time.Time
	pullSessions    [][2]time.Time
	initStart       time.Time
	initTotal       time.Duration
	observedRunning time.Time
	recorded        bool
}

// NewStartupTracker returns a tracker recording into m.
func (m *Metrics) NewStartupTracker(clk clock.PassiveClock) *StartupTracker {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &StartupTracker{m: m, clock: clk, pods: map[types.UID]*podStartup{}, excluded: map[types.UID]bool{}}
}

// ObservedPodOnWatch takes an API pod as a source delivered it at when:
// a new pending pod starts being tracked; a tracked one whose reported
// status showed every container running, seen now with every container
// running, is measured once.
func (t *StartupTracker) ObservedPodOnWatch(pod *corev1.Pod, when time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if podutil.IsTerminal(pod.Status.Phase) {
		delete(t.pods, pod.UID)
		return
	}
	st := t.pods[pod.UID]
	if st == nil {
		if t.excluded[pod.UID] || pod.Status.StartTime != nil {
			return
		}
		if unschedulable(pod) {
			t.excluded[pod.UID] = true
			return
		}
		t.pods[pod.UID] = &podStartup{}
		return
	}
	if unschedulable(pod) {
		delete(t.pods, pod.UID)
		t.excluded[pod.UID] = true
		return
	}
	if st.observedRunning.IsZero() || st.recorded || !allRunning(pod) {
		return
	}
	total := when.Sub(pod.CreationTimestamp.Time)
	sli := total - pullTime(st.pullSessions) - st.initTotal
	t.m.observeStartSLI(sli, total, stateful(pod))
	st.recorded = true
}

// PullStarted notes that an image pull for the pod began now.
func (t *StartupTracker) PullStarted(uid types.UID) {
	t.with(uid, func(st *podStartup) { st.pullStarts = append(st.pullStarts, t.clock.Now()) })
}

// PullFinished closes the pod's earliest open pull now.
func (t *StartupTracker) PullFinished(uid types.UID) {
	t.with(uid, func(st *podStartup) {
		if len(st.pullStarts) > 0 {
			st.pullSessions = append(st.pullSessions, [2]time.Time{st.pullStarts[0], t.clock.Now()})
			st.pullStarts = st.pullStarts[1:]
		}
	})
}

// InitContainerStarted notes an init container (not a sidecar) started at.
func (t *StartupTracker) InitContainerStarted(uid types.UID, at time.Time) {
	t.with(uid, func(st *podStartup) { st.initStart = at })
}

// InitContainerFinished adds the running init container's time, ended at.
func (t *StartupTracker) InitContainerFinished(uid types.UID, at time.Time) {
	t.with(uid, func(st *podStartup) {
		if !st.initStart.IsZero() {
			if d := at.Sub(st.initStart); d > 0 {
				st.initTotal += d
			}
			st.initStart = time.Time{}
		}
	})
}

// StatusUpdated takes a status the sync loop reported for pod (pod.Status):
// the first one with every container running marks the pod started.
func (t *StartupTracker) StatusUpdated(pod *corev1.Pod) {
	t.with(pod.UID, func(st *podStartup) {
		if !st.recorded && st.observedRunning.IsZero() && allRunning(pod) {
			st.observedRunning = t.clock.Now()
		}
	})
}

// Forget drops a pod that is gone.
func (t *StartupTracker) Forget(uid types.UID) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pods, uid)
	delete(t.excluded, uid)
}

func (t *StartupTracker) with(uid types.UID, f func(*podStartup)) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if st := t.pods[uid]; st != nil {
		f(st)
	}
}

// observeStartSLI records one measured start.
func (m *Metrics) observeStartSLI(sli, total time.Duration, stateful bool) {
	if m == nil {
		return
	}
	m.podStartTotal.WithLabelValues().Observe(total.Seconds())
	if !stateful {
		m.podStartSLI.WithLabelValues().Observe(sli.Seconds())
	}
}

// pullTime is the union of the pull sessions' spans.
func pullTime(sessions [][2]time.Time) time.Duration {
	var total time.Duration
	var end time.Time
	for i, s := range sessions {
		switch {
		case i == 0 || s[0].After(end):
			total += s[1].Sub(s[0])
			end = s[1]
		case s[1].After(end):
			total += s[1].Sub(end)
			end = s[1]
		}
	}
	return total
}

func allRunning(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running == nil || cs.State.Running.StartedAt.IsZero() {
			return false
		}
	}
	return true
}

// stateful: a volume other than secret, configMap, downwardAPI, emptyDir
// or projected (upstream leaves those pods out of the SLI).
func stateful(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Secret == nil && v.ConfigMap == nil && v.DownwardAPI == nil && v.EmptyDir == nil && v.Projected == nil {
			return true
		}
	}
	return false
}

func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return true
		}
	}
	return false
}
