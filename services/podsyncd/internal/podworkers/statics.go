package podworkers

import (
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/podsource"
)

// Static pods that share a full name (a manifest changed: a new UID for the
// same name and namespace) never run side by side, as with the kubelet's
// pod workers (allowStaticPodStart): the old one is stopped and cleaned up
// before the new one starts, so a host-network static pod (an API server,
// etcd) does not meet its predecessor on its ports. They start in the order
// their workers were created; one terminated before its turn leaves the
// line. Unlike the kubelet, which looks again every 10 s, the next in line
// is poked as soon as the name is free.

// errWaitingForStaticPod is a waiting static pod's last error
// (ListPodWorkers shows it).
var errWaitingForStaticPod = errors.New("waiting for another static pod of the same name to stop")

// fullName is the kubelet's pod full name, name_namespace.
func fullName(pod *corev1.Pod) string { return pod.Name + "_" + pod.Namespace }

// queueStatic puts a static pod in line to start.
func (w *Workers) queueStatic(pod *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.queueStaticLocked(pod)
}

// queueStaticLocked is queueStatic with w.mu held.
func (w *Workers) queueStaticLocked(pod *corev1.Pod) {
	if !podsource.IsStatic(pod) {
		return
	}
	name := fullName(pod)
	w.waiting[name] = append(w.waiting[name], pod.UID)
}

// allowStart says whether pod may run now: any pod that is not static;
// a static pod when it is the one started under its name, or when no pod
// is and it is the first in line that is still wanted (it then becomes the
// started one).
func (w *Workers) allowStart(pod *corev1.Pod) bool {
	if !podsource.IsStatic(pod) {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	name := fullName(pod)
	if uid, ok := w.started[name]; ok {
		return uid == pod.UID
	}
	line := w.waiting[name]
	for len(line) > 0 && !w.wantedLocked(line[0]) {
		line = line[1:]
	}
	if len(line) == 0 || line[0] != pod.UID {
		w.setLine(name, line)
		return false
	}
	w.setLine(name, line[1:])
	w.started[name] = pod.UID
	return true
}

// wantedLocked says whether uid's worker still wants its pod to run (it
// exists and is not stopping it). w.mu is held.
func (w *Workers) wantedLocked(uid types.UID) bool {
	wk := w.workers[uid]
	if wk == nil {
		return false
	}
	wk.mu.Lock()
	defer wk.mu.Unlock()
	return !wk.kill && wk.state == Syncing
}

func (w *Workers) setLine(name string, line []types.UID) {
	if len(line) == 0 {
		delete(w.waiting, name)
		return
	}
	w.waiting[name] = line
}

// releaseStatic frees pod's name once its worker has cleaned it up, and
// pokes the pods waiting for it.
func (w *Workers) releaseStatic(pod *corev1.Pod) {
	if !podsource.IsStatic(pod) {
		return
	}
	w.mu.Lock()
	name := fullName(pod)
	if w.started[name] == pod.UID {
		delete(w.started, name)
	}
	w.setLine(name, slices.DeleteFunc(w.waiting[name], func(uid types.UID) bool { return uid == pod.UID }))
	var next []*worker
	for _, uid := range w.waiting[name] {
		if wk := w.workers[uid]; wk != nil {
			next = append(next, wk)
		}
	}
	w.mu.Unlock()
	for _, wk := range next {
		wk.poke()
	}
}
