package syncloop

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodCgroups is the pod cgroup manager (podcgroups.Manager), on when the
// node runs with cgroupsPerQOS.
type PodCgroups interface {
	// EnsurePod creates the pod's cgroup when missing.
	EnsurePod(*corev1.Pod) error
	// DestroyPod removes the pod's cgroup, killing what is left in it.
	DestroyPod(types.UID) error
	// Housekeeping updates the QoS cgroups now and then and removes the pod
	// cgroups keep does not claim.
	Housekeeping(keep func(types.UID) bool)
	// SetActivePods installs the pods the QoS cgroups are sized for.
	SetActivePods(func() []*corev1.Pod)
}

// failedToCreatePodContainer is the kubelet's event reason when a pod's
// cgroup cannot be made.
const failedToCreatePodContainer = "FailedToCreatePodContainer"

// ensureCgroup makes the pod's cgroup before its sandbox and containers
// are started in it, as the kubelet's SyncPod does.
func (l *Loop) ensureCgroup(pod *corev1.Pod) error {
	if l.opts.Cgroups == nil {
		return nil
	}
	if err := l.opts.Cgroups.EnsurePod(pod); err != nil {
		if rec := l.rm.Recorder(); rec != nil {
			rec.Eventf(pod, corev1.EventTypeWarning, failedToCreatePodContainer, "unable to ensure pod container exists: %v", err)
		}
		return fmt.Errorf("failed to ensure that the pod: %v cgroups exist and are correctly applied: %w", pod.UID, err)
	}
	return nil
}

// destroyCgroup removes a terminated pod's cgroup (its containers are
// stopped), as the kubelet's SyncTerminatedPod does.
func (l *Loop) destroyCgroup(uid types.UID) error {
	if l.opts.Cgroups == nil {
		return nil
	}
	return l.opts.Cgroups.DestroyPod(uid)
}

// activePods are the admitted pods not known to have finished.
func (l *Loop) activePods() []*corev1.Pod { return l.pods.unfinished(nil) }

// cgroupHousekeeping removes the cgroups of pods that are neither wanted,
// nor have a worker, nor anything left in the runtime.
func (l *Loop) cgroupHousekeeping(want, present map[types.UID]bool) {
	if l.opts.Cgroups == nil {
		return
	}
	l.opts.Cgroups.Housekeeping(func(uid types.UID) bool {
		return want[uid] || present[uid] || l.workers.Has(uid)
	})
}
