package syncloop

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/podsource"
)

// forgetRemovedAfter bounds how long an API pod's removal is remembered for
// kubelet_restarted_pods_total: a UID comes back only when its pod is
// recreated while the node watches (static pods keep theirs; they are few
// and their UIDs are stable, so they are remembered for good).
const forgetRemovedAfter = 10 * time.Minute

// observeStart records kubelet_pod_start_duration_seconds once per pod: when
// a sync turns it from Pending (its last status, or the one this sync
// began with when none was sent yet) to Running, measured from its first
// sighting. Upstream's kubelet also observes the first sync of every pod
// (kubernetes/kubernetes#132268); this one observes only the start.
func (l *Loop) observeStart(pod *corev1.Pod, prev, pre, post *corev1.PodStatus) {
	before := prev
	if before == nil {
		before = pre
	}
	if before.Phase != corev1.PodPending || post.Phase != corev1.PodRunning {
		return
	}
	seen := podsource.FirstSeen(pod)
	if seen.IsZero() {
		return
	}
	l.opts.Metrics.PodStarted(l.opts.Clock.Since(seen))
}

// countPods sets kubelet_desired_pods (every pod the sources want) and
// kubelet_active_pods (admitted and not finished), static and API apart,
// and forgets old removals; housekeeping calls it.
func (l *Loop) countPods() {
	desiredAPI, desiredStatic := countBySource(l.store.Pods())
	activeAPI, activeStatic := countBySource(l.activePods())
	l.opts.Metrics.SetPodCounts(desiredAPI, desiredStatic, activeAPI, activeStatic)
	l.pods.forgetRemovals(l.opts.Clock.Now().Add(-forgetRemovedAfter))
}

// countBySource counts pods from the API server and static pods apart.
func countBySource(pods []*corev1.Pod) (api, static int) {
	for _, p := range pods {
		if podsource.IsStatic(p) {
			static++
		} else {
			api++
		}
	}
	return api, static
}

// observedOnWatch hands an API pod a source delivered to the pod start
// SLI tracker (static pods are not measured, as upstream).
func (l *Loop) observedOnWatch(pod *corev1.Pod) {
	if l.opts.Startup != nil && !podsource.IsStatic(pod) {
		l.opts.Startup.ObservedPodOnWatch(pod, l.opts.Clock.Now())
	}
}
