package syncloop

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/services/podsyncd/internal/podworkers"
)

// eviction is how an evicted pod's status is to end.
type eviction struct {
	message   string
	condition bool // a DisruptionTarget condition too
}

// ActivePods are the admitted pods that may still run: not finished and
// not already being evicted (the kubelet's active pods, which the eviction
// manager ranks), sorted by namespace and name so ranking ties are stable.
func (l *Loop) ActivePods() []*corev1.Pod {
	pods := l.pods.unfinished(func(_ types.UID, s *podState) bool { return s.evicted != nil })
	for i, p := range pods {
		pods[i] = l.allocated(p)
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	return pods
}

// Evict kills pod with the grace period; from then on its status is
// Failed with reason Evicted and the message, with a DisruptionTarget
// condition (TerminationByKubelet) when disruptionCondition is set, and
// its restart policy does not bring it back.
func (l *Loop) Evict(pod *corev1.Pod, gracePeriod int64, message string, disruptionCondition bool) {
	l.pods.evict(pod.UID, eviction{message: message, condition: disruptionCondition})
	grace := gracePeriod
	l.workers.Terminate(pod, &grace)
}

// PodStopped says whether an evicted pod is cleaned up: its containers
// and sandboxes removed and its volumes gone (an evicted pod is killed for
// good, so its worker goes through SyncTerminatedPod with remove), or it
// has no worker at all.
func (l *Loop) PodStopped(uid types.UID) bool {
	return l.pods.get(uid).cleaned || l.workers == nil || !l.workers.Has(uid)
}

// DeleteAllUnusedContainers is the eviction manager's container reclaim
// (the kubelet's DeleteAllUnusedContainers): one container GC pass in
// which the containers of finished pods that still exist go too, not only
// those of removed pods.
func (l *Loop) DeleteAllUnusedContainers(ctx context.Context) error {
	if l.opts.ContainerGC == nil {
		return nil
	}
	gone := l.podGone(ctx)
	finished := func(uid types.UID) bool {
		s := l.pods.get(uid)
		return s.finished() && l.workerTerminated(uid)
	}
	res, err := l.opts.ContainerGC.DeleteAllUnused(ctx, gone, finished)
	if res.Containers+res.Sandboxes+res.LogDirs > 0 {
		l.log.Info("eviction: removed unused containers", "containers", res.Containers, "sandboxes", res.Sandboxes, "podLogDirs", res.LogDirs)
	}
	return err
}

// workerTerminated says whether nothing of the pod runs: its worker
// reached Terminated, or it has none.
func (l *Loop) workerTerminated(uid types.UID) bool {
	if l.workers == nil {
		return true
	}
	for _, w := range l.workers.List() {
		if w.UID == uid {
			return w.State == podworkers.Terminated
		}
	}
	return true
}
