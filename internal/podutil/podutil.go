package podutil

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/podsource"
)

// Priorities and class names of scheduling's built-in priority classes
// (k8s.io/kubernetes pkg/apis/scheduling; not in k8s.io/api).
const (
	// DefaultPriority is the priority of a pod without a priority class
	// when no class is the global default.
	DefaultPriority int32 = 0
	// HighestUserDefinablePriority is the highest priority a user's
	// PriorityClass may have.
	HighestUserDefinablePriority int32 = 1000000000
	// SystemCriticalPriority is the lowest priority of the system classes;
	// a pod at or above it is critical.
	SystemCriticalPriority = 2 * HighestUserDefinablePriority
	// SystemNodeCritical is the priority class of pods a node cannot run
	// without.
	SystemNodeCritical = "system-node-critical"
	// SystemClusterCritical is the priority class of pods a cluster cannot
	// run without.
	SystemClusterCritical = "system-cluster-critical"
)

// Reasons of the ContainersReady and Ready conditions, the kubelet's
// spelling.
const (
	ReasonContainersNotReady     = "ContainersNotReady"
	ReasonPodCompleted           = "PodCompleted"
	ReasonPodFailed              = "PodFailed"
	ReasonReadinessGatesNotReady = "ReadinessGatesNotReady"
)

// IsTerminal reports whether phase is Succeeded or Failed: the pod's
// containers never run again.
func IsTerminal(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}

// IsSidecar reports whether the init container c is a sidecar: its
// restartPolicy is Always, so it keeps running beside the app containers.
// Only meaningful for an init container; a regular container never has
// a restartPolicy of Always.
func IsSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// IsCritical is the kubelet's IsCriticalPod: static and mirror pods and pods
// at system-critical priority or above are never evicted and always
// admitted.
func IsCritical(pod *corev1.Pod) bool {
	return podsource.IsStatic(pod) || podsource.IsMirror(pod) ||
		(pod.Spec.Priority != nil && *pod.Spec.Priority >= SystemCriticalPriority)
}

// IsNodeCritical is the kubelet's IsNodeCriticalPod: a critical pod in the
// system-node-critical class.
func IsNodeCritical(pod *corev1.Pod) bool {
	return IsCritical(pod) && pod.Spec.PriorityClassName == SystemNodeCritical
}

// ContainersReadyCondition is the kubelet's ContainersReady condition of pod
// with status st (its phase and container statuses): False with
// PodCompleted once Succeeded and every container has a status, False with
// PodFailed once Failed, False with ContainersNotReady naming the sidecars
// and regular containers without a status (unknown) or not ready (unready),
// in spec order, else True. A container's status is looked up by name in
// both lists, as the kubelet does. Times are left to the caller.
func ContainersReadyCondition(pod *corev1.Pod, st *corev1.PodStatus) corev1.PodCondition {
	var unknown, unready []string
	check := func(name string) {
		for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses} {
			for i := range list {
				if list[i].Name == name {
					if !list[i].Ready {
						unready = append(unready, name)
					}
					return
				}
			}
		}
		unknown = append(unknown, name)
	}
	for i := range pod.Spec.InitContainers {
		if IsSidecar(&pod.Spec.InitContainers[i]) {
			check(pod.Spec.InitContainers[i].Name)
		}
	}
	for i := range pod.Spec.Containers {
		check(pod.Spec.Containers[i].Name)
	}
	c := corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}
	switch {
	case st.Phase == corev1.PodSucceeded && len(unknown) == 0:
		c.Status, c.Reason = corev1.ConditionFalse, ReasonPodCompleted
	case st.Phase == corev1.PodFailed:
		c.Status, c.Reason = corev1.ConditionFalse, ReasonPodFailed
	case len(unknown) > 0 || len(unready) > 0:
		var msg []string
		if len(unknown) > 0 {
			msg = append(msg, fmt.Sprintf("containers with unknown status: %s", unknown))
		}
		if len(unready) > 0 {
			msg = append(msg, fmt.Sprintf("containers with unready status: %s", unready))
		}
		c.Status, c.Reason, c.Message = corev1.ConditionFalse, ReasonContainersNotReady, strings.Join(msg, ", ")
	}
	return c
}

// ReadyCondition is the kubelet's Ready condition of pod whose
// ContainersReady condition is cr: False with cr's reason and message while
// the containers are not ready, else False with ReadinessGatesNotReady while
// a readiness gate's condition (looked up in conds, the last of a type wins)
// is missing or not True, else True. Times are left to the caller.
func ReadyCondition(pod *corev1.Pod, cr corev1.PodCondition, conds []corev1.PodCondition) corev1.PodCondition {
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: cr.Status, Reason: cr.Reason, Message: cr.Message}
	if cr.Status != corev1.ConditionTrue {
		return ready
	}
	var gates []string
	for _, g := range pod.Spec.ReadinessGates {
		var c *corev1.PodCondition
		for i := range conds {
			if conds[i].Type == g.ConditionType {
				c = &conds[i]
			}
		}
		if c == nil {
			gates = append(gates, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
		} else if c.Status != corev1.ConditionTrue {
			gates = append(gates, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", g.ConditionType, c.Status))
		}
	}
	if len(gates) > 0 {
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, ReasonReadinessGatesNotReady, strings.Join(gates, ", ")
	}
	return ready
}

// FindContainer returns the container of pod named name, looking in the
// containers, then the init containers and, when ephemeral is true, the
// ephemeral containers; nil when there is none or pod is nil. The result
// points into pod (an ephemeral container's common part is reinterpreted as
// a Container, not copied), so callers must not modify it when pod is shared.
// Pass ephemeral=false where upstream looks only at containers and init
// containers (a resourceFieldRef's containerName).
func FindContainer(pod *corev1.Pod, name string, ephemeral bool) *corev1.Container {
	if pod == nil {
		return nil
	}
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	if ephemeral {
		for i := range pod.Spec.EphemeralContainers {
			if pod.Spec.EphemeralContainers[i].Name == name {
				return (*corev1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
			}
		}
	}
	return nil
}
