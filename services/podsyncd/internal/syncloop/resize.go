package syncloop

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/services/podsyncd/internal/admission"
	"github.com/microlet/microlet/services/podsyncd/internal/allocation"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// allocated is the pod with its allocated resources (the spec while no
// resize is pending).
func (l *Loop) allocated(pod *corev1.Pod) *corev1.Pod {
	if l.opts.Allocation == nil {
		return pod
	}
	p, _ := l.opts.Allocation.PodFromAllocation(pod)
	return p
}

// allocate checkpoints an admitted pod's resources, unless it already has an
// allocation (adopted after a restart: a resize may be under way).
func (l *Loop) allocate(pod *corev1.Pod) {
	a := l.opts.Allocation
	if a == nil {
		return
	}
	if _, ok := a.Allocated(pod.UID); ok {
		return
	}
	if err := a.SetAllocated(pod); err != nil {
		l.log.Error("could not checkpoint the pod's allocated resources", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	}
}

// otherAllocatedPods are the admitted, unfinished pods but uid, each with its
// allocated resources.
func (l *Loop) otherAllocatedPods(uid types.UID) []*corev1.Pod {
	out := l.pods.unfinished(func(u types.UID, _ *podState) bool { return u == uid })
	for i, p := range out {
		out[i] = l.allocated(p)
	}
	return out
}

// handleResize admits or defers a pod's resize (its spec resources differ
// from its allocation) as the kubelet's allocation manager does, against
// the node's allocatable and the other pods' allocations, and records the
// kubelet's events. It runs on every sync of the pod, so a deferred resize
// is retried at least every resync period.
func (l *Loop) handleResize(ctx context.Context, pod *corev1.Pod) {
	a := l.opts.Allocation
	if a == nil {
		return
	}
	a.Backfill(pod)
	l.allocMu.Lock()
	defer l.allocMu.Unlock()
	out, err := a.HandleResize(pod, func(p *corev1.Pod) (bool, string, string) {
		r := admission.Admit(p, l.getNode(ctx), l.otherAllocatedPods(p.UID))
		return r.Admit, r.Reason, r.Message
	})
	rec := l.rm.Recorder()
	switch {
	case err != nil:
		l.log.Error("could not checkpoint a resize's allocation", "pod", pod.Namespace+"/"+pod.Name, "err", err)
	case out.Allocated:
		l.log.Info("resize allocated", "pod", pod.Namespace+"/"+pod.Name, "generation", pod.Generation)
		rec.Event(pod, corev1.EventTypeNormal, allocation.EventResizeStarted, allocation.EventMessage("Pod resize started", pod, pod.Generation, ""))
	case out.Pending && out.Changed:
		l.log.Info("resize pending", "pod", pod.Namespace+"/"+pod.Name, "reason", out.Reason, "message", out.Message)
		reason := allocation.EventResizeDeferred
		if out.Reason == corev1.PodReasonInfeasible {
			reason = allocation.EventResizeInfeasible
		}
		rec.Event(pod, corev1.EventTypeWarning, reason, allocation.EventMessage("Pod resize "+out.Reason, pod, pod.Generation, out.Message))
	}
}

// resizeProgress sets PodResizeInProgress while a running container's
// actuated resources differ from its allocation and clears it, with a
// ResizeCompleted event, once they match (the kubelet's SyncPod step);
// resizeErr (a failed in-place update) puts reason Error on it.
func (l *Loop) resizeProgress(apod *corev1.Pod, st *podruntime.PodStatus, resizeErr *podruntime.ResizeError) {
	a := l.opts.Allocation
	if a == nil {
		return
	}
	running := func(name string) bool {
		c := st.Latest(name)
		return c != nil && c.State == podruntime.StateRunning
	}
	rec := l.rm.Recorder()
	if a.InProgress(apod, running) {
		a.SetInProgress(apod.UID, "", "", apod.Generation)
		if resizeErr != nil {
			if gen, changed := a.SetInProgress(apod.UID, corev1.PodReasonError, resizeErr.Message, apod.Generation); changed {
				rec.Event(apod, corev1.EventTypeWarning, allocation.EventResizeError, allocation.EventMessage("Pod resize error", apod, gen, resizeErr.Message))
			}
		}
		return
	}
	if gen, cleared := a.ClearInProgress(apod.UID); cleared {
		l.log.Info("resize completed", "pod", apod.Namespace+"/"+apod.Name, "generation", gen)
		rec.Event(apod, corev1.EventTypeNormal, allocation.EventResizeCompleted, allocation.EventMessage("Pod resize completed", apod, gen, ""))
	}
}

// resizeConditions are the pod's resize conditions for its status.
func (l *Loop) resizeConditions(pod *corev1.Pod) []corev1.PodCondition {
	if l.opts.Allocation == nil {
		return nil
	}
	return l.opts.Allocation.Conditions(pod.UID)
}

// retryDeferredResizes resyncs the pods whose resize waits for room, as the
// kubelet retries pending resizes when a pod terminates or is removed,
// rather than at their next periodic resync.
func (l *Loop) retryDeferredResizes(except types.UID) {
	a := l.opts.Allocation
	if a == nil || l.workers == nil {
		return
	}
	for _, uid := range l.pods.admittedUIDs() {
		if c := a.Pending(uid); uid != except && c != nil && c.Reason == corev1.PodReasonDeferred {
			l.workers.Trigger(uid)
		}
	}
}
