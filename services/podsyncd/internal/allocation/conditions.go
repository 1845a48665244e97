package allocation

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// conditions are a pod's two resize conditions (nil when absent).
type conditions struct {
	pending, inProgress *corev1.PodCondition
}

// newCondition is a True resize condition; the transition time moves only
// when the reason does, as in the kubelet's status manager.
func newCondition(t corev1.PodConditionType, old *corev1.PodCondition, reason, message string, gen int64) *corev1.PodCondition {
	now := metav1.Now()
	transition := now
	if old != nil && old.Reason == reason {
		transition = old.LastTransitionTime
	}
	return &corev1.PodCondition{
		Type: t, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: transition,
		ObservedGeneration: gen, Reason: reason, Message: message,
	}
}

func (s *State) condsLocked(uid types.UID) *conditions {
	c := s.conds[uid]
	if c == nil {
		c = &conditions{}
		s.conds[uid] = c
	}
	return c
}

// Backfill takes the resize conditions of a pod's API status the first time
// the pod is seen, so a restarted podsyncd goes on with them (the kubelet's
// BackfillPodResizeConditions).
func (s *State) Backfill(pod *corev1.Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.backfill[pod.UID] {
		return
	}
	s.backfill[pod.UID] = true
	for _, c := range pod.Status.Conditions {
		switch c.Type {
		case corev1.PodResizePending:
			s.condsLocked(pod.UID).pending = newCondition(c.Type, nil, c.Reason, c.Message, c.ObservedGeneration)
		case corev1.PodResizeInProgress:
			s.condsLocked(pod.UID).inProgress = newCondition(c.Type, nil, c.Reason, c.Message, c.ObservedGeneration)
		}
	}
}

// SetPending sets PodResizePending with reason Infeasible, or Deferred for
// any other reason, and says whether its reason or generation changed.
func (s *State) SetPending(uid types.UID, reason, message string, gen int64) bool {
	if reason != corev1.PodReasonInfeasible {
		reason = corev1.PodReasonDeferred
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.condsLocked(uid)
	prev := c.pending
	c.pending = newCondition(corev1.PodResizePending, prev, reason, message, gen)
	return prev == nil || prev.Reason != reason || prev.ObservedGeneration != gen
}

// ClearPending drops PodResizePending.
func (s *State) ClearPending(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conds[uid]; c != nil {
		c.pending = nil
	}
}

// Pending is the pod's PodResizePending condition, nil when there is none.
func (s *State) Pending(uid types.UID) *corev1.PodCondition {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conds[uid]; c != nil && c.pending != nil {
		return c.pending.DeepCopy()
	}
	return nil
}

// SetInProgress sets PodResizeInProgress. An existing condition keeps its
// generation (clear it first to move it) and, when reason and message are
// empty, its reason and message. It returns the condition's generation and
// whether it changed.
func (s *State) SetInProgress(uid types.UID, reason, message string, gen int64) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.condsLocked(uid)
	prev := c.inProgress
	if prev != nil {
		if reason == "" && message == "" {
			reason, message = prev.Reason, prev.Message
		}
		gen = prev.ObservedGeneration
	}
	c.inProgress = newCondition(corev1.PodResizeInProgress, prev, reason, message, gen)
	if prev == nil {
		return gen, true
	}
	a, b := *prev, *c.inProgress
	a.LastProbeTime, a.LastTransitionTime = b.LastProbeTime, b.LastTransitionTime
	return gen, !reflect.DeepEqual(a, b)
}

// ClearInProgress drops PodResizeInProgress and returns the generation it
// had, and whether there was one.
func (s *State) ClearInProgress(uid types.UID) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conds[uid]
	if c == nil || c.inProgress == nil {
		return 0, false
	}
	gen := c.inProgress.ObservedGeneration
	c.inProgress = nil
	return gen, true
}

// Conditions are the pod's resize conditions for its status: pending first,
// as the kubelet lists them.
func (s *State) Conditions(uid types.UID) []corev1.PodCondition {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conds[uid]
	if c == nil {
		return nil
	}
	var out []corev1.PodCondition
	for _, p := range []*corev1.PodCondition{c.pending, c.inProgress} {
		if p != nil {
			out = append(out, *p.DeepCopy())
		}
	}
	return out
}

// ClearConditions drops both conditions (a terminal pod shows none).
func (s *State) ClearConditions(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conds, uid)
}
