package podstatus

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/podutil"
)

// Terminate is TerminatePod's rule: every container that is not terminated
// is marked terminated with ContainerStatusUnknown and exit code 137 (init
// containers only up to the last one that ever started, regular containers
// only once the pod has initialised), and a pod from the API that is not yet
// finished becomes Failed. Static pods keep their phase, as upstream does.
// cur is the status to start from (cached, else the pod's own).
func Terminate(pod *corev1.Pod, cur *corev1.PodStatus) corev1.PodStatus {
	st := *cur.DeepCopy()
	unknown := func(cs *corev1.ContainerStatus) {
		if cs.State.Terminated != nil {
			return
		}
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason:   ReasonStatusUnknown,
			Message:  "The container could not be located when the pod was terminated",
			ExitCode: 137,
		}}
	}
	if initialized(pod, cur) {
		for i := range st.ContainerStatuses {
			unknown(&st.ContainerStatuses[i])
		}
	}
	for i := range startedPrefix(st.InitContainerStatuses) {
		unknown(&st.InitContainerStatuses[i])
	}
	if !podsource.IsStatic(pod) && !podutil.IsTerminal(st.Phase) {
		st.Phase = corev1.PodFailed
	}
	return st
}

// initialized reports whether the pod shows evidence of having started its
// regular containers, so their missing statuses count as failures.
func initialized(pod *corev1.Pod, st *corev1.PodStatus) bool {
	if len(pod.Spec.InitContainers) == 0 {
		return true
	}
	for _, cs := range st.ContainerStatuses {
		if cs.LastTerminationState.Terminated != nil || cs.State.Waiting == nil {
			return true
		}
	}
	n := len(st.InitContainerStatuses)
	if n == 0 {
		return false
	}
	last := st.InitContainerStatuses[n-1]
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.Name != last.Name {
			continue
		}
		if podutil.IsSidecar(c) {
			return last.State.Running != nil && last.Started != nil && *last.Started
		}
	}
	for _, t := range []*corev1.ContainerStateTerminated{last.LastTerminationState.Terminated, last.State.Terminated} {
		if t != nil && t.ExitCode == 0 {
			return true
		}
	}
	return false
}

// startedPrefix drops the trailing init containers that never started (still
// waiting without a previous termination); at least the first one remains.
func startedPrefix(list []corev1.ContainerStatus) []corev1.ContainerStatus {
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].State.Waiting == nil || list[i].LastTerminationState.Terminated != nil {
			return list[:i+1]
		}
	}
	if len(list) > 0 {
		return list[:1]
	}
	return nil
}

// Merge builds the status to write over api (the API copy's status): the
// kubelet's own conditions come from ours, every other condition is kept
// from the API; DisruptionTarget is sent only with the terminal phase; a
// terminal phase is held back while containers could still run; a terminal
// pod is never reported Ready. Neither input is modified.
func Merge(pod *corev1.Pod, api, ours corev1.PodStatus, couldHaveRunningContainers bool) corev1.PodStatus {
	out := *ours.DeepCopy()
	toTerminal := !podutil.IsTerminal(api.Phase) && podutil.IsTerminal(ours.Phase)
	conds := foreignConditions(api.Conditions, len(ours.Conditions))
	for _, c := range ours.Conditions {
		switch {
		case IsKubeletCondition(c.Type):
			conds = append(conds, c)
		case IsSharedCondition(c.Type) && toTerminal && !couldHaveRunningContainers:
			replaced := false
			for i := range conds {
				if conds[i].Type == c.Type {
					if conds[i].Status == c.Status {
						c.LastTransitionTime = conds[i].LastTransitionTime
					}
					conds[i], replaced = c, true
				}
			}
			if !replaced {
				conds = append(conds, c)
			}
		}
	}
	out.Conditions = conds
	// Readiness gates are judged on the conditions others wrote, which
	// only the API's copy carries.
	applyReadinessGates(pod, &out, condition(&api, corev1.PodReady))
	out.ResourceClaimStatuses = api.ResourceClaimStatuses
	out.ExtendedResourceClaimStatus = api.ExtendedResourceClaimStatus
	out.NodeAllocatableResourceClaimStatuses = api.NodeAllocatableResourceClaimStatuses
	if toTerminal && couldHaveRunningContainers {
		out.Phase, out.Reason, out.Message = api.Phase, api.Reason, api.Message
	}
	if podutil.IsTerminal(out.Phase) {
		reason := podutil.ReasonPodFailed
		if out.Phase == corev1.PodSucceeded {
			reason = podutil.ReasonPodCompleted
		}
		for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
			if c := condition(&out, t); c != nil && c.Status == corev1.ConditionTrue {
				c.Status, c.Reason, c.Message = corev1.ConditionFalse, reason, ""
				if o := condition(&api, t); o == nil || o.Status != corev1.ConditionFalse {
					c.LastTransitionTime = nowFunc()
				} else {
					c.LastTransitionTime = o.LastTransitionTime
				}
			}
		}
	}
	return out
}

// CouldHaveRunningContainers is statusd's view of upstream's pod-worker
// question: containers may still run unless the node reported the pod's
// resources reclaimed or every known container has terminated.
func CouldHaveRunningContainers(st *corev1.PodStatus, reclaimed bool) bool {
	if reclaimed {
		return false
	}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for _, cs := range list {
			if cs.State.Running != nil {
				return true
			}
		}
	}
	return false
}

// FindContainer returns the status of the container with the runtime id
// containerID ("type://id") among regular and init containers.
func FindContainer(st *corev1.PodStatus, containerID string) *corev1.ContainerStatus {
	for i := range st.ContainerStatuses {
		if st.ContainerStatuses[i].ContainerID == containerID {
			return &st.ContainerStatuses[i]
		}
	}
	for i := range st.InitContainerStatuses {
		if st.InitContainerStatuses[i].ContainerID == containerID {
			return &st.InitContainerStatuses[i]
		}
	}
	return nil
}

// ReadinessConditions recomputes ContainersReady and PodReady of st after a
// readiness change, the way the kubelet generates them: every regular
// container and every sidecar must be ready, and every readiness gate's
// condition must be True for the pod to be Ready.
func ReadinessConditions(pod *corev1.Pod, st *corev1.PodStatus) {
	cr := podutil.ContainersReadyCondition(pod, st)
	// The gates' conditions are written by others: the pod object's own
	// status carries the ones the node has seen, st those merged into it.
	ready := podutil.ReadyCondition(pod, cr, append(slices.Clone(pod.Status.Conditions), st.Conditions...))
	set := func(c corev1.PodCondition) {
		if o := condition(st, c.Type); o != nil {
			c.LastTransitionTime, c.LastProbeTime, c.ObservedGeneration = o.LastTransitionTime, o.LastProbeTime, o.ObservedGeneration
			*o = c
			return
		}
		st.Conditions = append(st.Conditions, c)
	}
	set(cr)
	set(ready)
}

// applyReadinessGates sets st's Ready condition from its ContainersReady
// condition and the readiness gates of pod, whose conditions are looked up
// in st itself (merged with the API's). prev is the Ready condition the API
// shows: its transition time is kept while the status stays the same.
// Pods without gates, or without a ContainersReady condition, are left as
// they are.
func applyReadinessGates(pod *corev1.Pod, st *corev1.PodStatus, prev *corev1.PodCondition) {
	if len(pod.Spec.ReadinessGates) == 0 {
		return
	}
	cr, cur := condition(st, corev1.ContainersReady), condition(st, corev1.PodReady)
	if cr == nil || cur == nil {
		return
	}
	want := podutil.ReadyCondition(pod, *cr, st.Conditions)
	if want.Status == cur.Status && want.Reason == cur.Reason && want.Message == cur.Message {
		return
	}
	want.ObservedGeneration, want.LastProbeTime = cur.ObservedGeneration, cur.LastProbeTime
	switch {
	case prev != nil && prev.Status == want.Status:
		want.LastTransitionTime = prev.LastTransitionTime
	case want.Status == cur.Status:
		want.LastTransitionTime = cur.LastTransitionTime
	default:
		want.LastTransitionTime = nowFunc()
	}
	*cur = want
}

// GateConditionsChanged reports whether a pod update changed the status of
// a condition one of the pod's readiness gates names, so that its Ready
// condition must be generated again (the kubelet's
// NeedToReconcilePodReadiness, asked on the API's pod events).
func GateConditionsChanged(old, cur *corev1.Pod) bool {
	for _, g := range cur.Spec.ReadinessGates {
		a, b := condition(&old.Status, g.ConditionType), condition(&cur.Status, g.ConditionType)
		if (a == nil) != (b == nil) || (a != nil && a.Status != b.Status) {
			return true
		}
	}
	return false
}

// foreignConditions returns the conditions of list the kubelet does not own
// (written by others, such as readiness gates), in a slice with room for
// extra more.
func foreignConditions(list []corev1.PodCondition, extra int) []corev1.PodCondition {
	out := make([]corev1.PodCondition, 0, len(list)+extra)
	for _, c := range list {
		if !IsKubeletCondition(c.Type) {
			out = append(out, c)
		}
	}
	return out
}
