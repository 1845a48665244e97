package syncloop

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/podutil"
)

// podState is what the loop knows of one pod beyond its worker's stage
// (podworkers keeps that): whether it was admitted or refused, the status
// last reported, why podsyncd ends it (eviction, node shutdown), whether
// its clean-up finished and when it left its source. It is the loop's half
// of the kubelet's per-pod sync status. Its life is not the worker's: a
// refused pod never has a worker, and a removal is remembered after the
// worker is gone, so the loop keeps it apart. The zero value is a pod the
// loop knows nothing of.
type podState struct {
	// admitted is the pod as admitted (or adopted after a restart) and as
	// last updated by its source; nil until then and once its clean-up
	// began.
	admitted *corev1.Pod
	// rejected is set for a pod refused at admission or already finished
	// when first seen: it never runs, and its deletion reclaims nothing.
	rejected bool
	// last is the status last reported to statusd.
	last *corev1.PodStatus
	// evicted says how the status of a pod the eviction manager evicts
	// ends (Failed/Evicted); nil while it is not evicted.
	evicted *eviction
	// shutdownKilled is set for a pod the node shutdown manager stopped:
	// its status is Failed/Terminated (unless it Succeeded).
	shutdownKilled bool
	// cleaned is set once SyncTerminatedPod of the removed pod finished
	// (containers and volumes gone): the eviction manager waits for it
	// before its next pass.
	cleaned bool
	// removed is when the pod left its source, so one that comes back
	// under the same UID counts as restarted.
	removed *removedPod
}

// removedPod is a pod that left its source.
type removedPod struct {
	at     time.Time
	static bool
}

// finished says whether the pod was admitted and its last status is
// terminal.
func (s *podState) finished() bool {
	return s.admitted != nil && s.last != nil && podutil.IsTerminal(s.last.Phase)
}

// empty says whether nothing is known of the pod, so it needs no entry.
func (s *podState) empty() bool {
	return s.admitted == nil && !s.rejected && s.last == nil && s.evicted == nil &&
		!s.shutdownKilled && !s.cleaned && s.removed == nil
}

// podStates holds every pod's podState under one mutex; its methods are
// the transitions, each taken whole under the lock. A pod has an entry
// only while something is known of it.
type podStates struct {
	mu   sync.Mutex
	pods map[types.UID]*podState
}

func newPodStates() *podStates { return &podStates{pods: map[types.UID]*podState{}} }

// get returns a copy of uid's state (the zero value when none).
func (p *podStates) get(uid types.UID) podState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.pods[uid]; s != nil {
		return *s
	}
	return podState{}
}

// change applies f to uid's state under the lock, making the entry when
// missing and dropping it when f leaves it empty.
func (p *podStates) change(uid types.UID, f func(*podState)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changeLocked(uid, f)
}

func (p *podStates) changeLocked(uid types.UID, f func(*podState)) {
	s := p.pods[uid]
	if s == nil {
		s = &podState{}
	}
	f(s)
	if s.empty() {
		delete(p.pods, uid)
	} else {
		p.pods[uid] = s
	}
}

// added is a source's ADD of uid: whether the pod was admitted or refused
// before, and whether it comes back after leaving its source (counted as
// restarted), which is forgotten now, as is its clean-up (it runs again).
func (p *podStates) added(uid types.UID) (admitted, rejected, restarted bool) {
	p.change(uid, func(s *podState) {
		admitted, rejected, restarted = s.admitted != nil, s.rejected, s.removed != nil
		s.removed, s.cleaned = nil, false
	})
	return admitted, rejected, restarted
}

// updated keeps a source's new version of an admitted pod; false when the
// pod is not admitted.
func (p *podStates) updated(pod *corev1.Pod) (admitted bool) {
	p.change(pod.UID, func(s *podState) {
		if admitted = s.admitted != nil; admitted {
			s.admitted = pod
		}
	})
	return admitted
}

// admit records pod as admitted (or adopted).
func (p *podStates) admit(pod *corev1.Pod) {
	p.change(pod.UID, func(s *podState) { s.admitted = pod })
}

// reject records uid as refused: it is never started.
func (p *podStates) reject(uid types.UID) {
	p.change(uid, func(s *podState) { s.rejected = true })
}

// removed records that uid's pod (a static one when static) left its
// source at at: it may be admitted again, and its clean-up is awaited anew.
// A refused pod has no clean-up to drop its last status, so it is dropped
// here: nothing is left of it once its removal is forgotten, and the same
// UID added again starts without the refusal's status.
func (p *podStates) removed(uid types.UID, at time.Time, static bool) {
	p.change(uid, func(s *podState) {
		if s.rejected {
			s.last = nil
		}
		s.rejected, s.cleaned = false, false
		s.removed = &removedPod{at: at, static: static}
	})
}

// reported keeps st as the pod's last reported status.
func (p *podStates) reported(uid types.UID, st *corev1.PodStatus) {
	p.change(uid, func(s *podState) { s.last = st })
}

// evict records that the eviction manager ends the pod as ev says.
func (p *podStates) evict(uid types.UID, ev eviction) {
	p.change(uid, func(s *podState) { s.evicted = &ev })
}

// killForShutdown records that the node shutdown manager stops the pod.
func (p *podStates) killForShutdown(uid types.UID) {
	p.change(uid, func(s *podState) { s.shutdownKilled = true })
}

// cleaningUp is the start of a removed pod's clean-up, its containers
// gone: it is no longer admitted, and its last status and the reasons it
// was ended are dropped.
func (p *podStates) cleaningUp(uid types.UID) {
	p.change(uid, func(s *podState) {
		s.admitted, s.last, s.evicted, s.shutdownKilled = nil, nil, nil, false
	})
}

// cleanedUp is the end of a removed pod's clean-up, its volumes and dir
// gone too.
func (p *podStates) cleanedUp(uid types.UID) {
	p.change(uid, func(s *podState) { s.cleaned = true })
}

// unfinished are the admitted pods not known to have finished, but those
// skip (called under the lock) says to leave out.
func (p *podStates) unfinished(skip func(types.UID, *podState) bool) []*corev1.Pod {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for uid, s := range p.pods {
		if s.admitted == nil || s.finished() || (skip != nil && skip(uid, s)) {
			continue
		}
		out = append(out, s.admitted)
	}
	return out
}

// admittedUIDs are the UIDs of every admitted pod.
func (p *podStates) admittedUIDs() []types.UID {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]types.UID, 0, len(p.pods))
	for uid, s := range p.pods {
		if s.admitted != nil {
			out = append(out, uid)
		}
	}
	return out
}

// forgetRemovals drops the removals of API pods older than cutoff (static
// pods' are kept: see forgetRemovedAfter).
func (p *podStates) forgetRemovals(cutoff time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid, s := range p.pods {
		if r := s.removed; r != nil && !r.static && r.at.Before(cutoff) {
			p.changeLocked(uid, func(s *podState) { s.removed = nil })
		}
	}
}
