package allocation

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
)

// Event reasons of a resize, the kubelet's.
const (
	EventResizeStarted    = "ResizeStarted"
	EventResizeCompleted  = "ResizeCompleted"
	EventResizeDeferred   = "ResizeDeferred"
	EventResizeInfeasible = "ResizeInfeasible"
	EventResizeError      = "ResizeError"
)

// podLevelInfeasible is the kubelet's message for a pod-level resources
// resize, which podsyncd refuses as Infeasible: it resizes containers and
// their pod cgroup's limits, not a pod-level resources stanza (and the Node
// does not declare InPlacePodLevelResourcesVerticalScaling).
const podLevelInfeasible = "InPlacePodLevelResourcesVerticalScaling is disabled"

// Admitter checks a pod with its desired resources against the node and the
// other pods' allocations: ok, or a reason and message (the admission
// predicates' OutOfcpu and the like, which become Deferred).
type Admitter func(pod *corev1.Pod) (ok bool, reason, message string)

// Outcome is what HandleResize did.
type Outcome struct {
	// Allocated is set when the desired resources became the allocation.
	Allocated bool
	// Pending is set when the resize waits (PodResizePending); Changed says
	// whether the condition's reason or generation changed, Reason and
	// Message are the condition's.
	Pending, Changed bool
	Reason, Message  string
}

// HandleResize is the kubelet's handlePodResourcesResize: when pod's spec
// resources differ from its allocation, the resize is admitted (the new
// resources become the allocation, PodResizePending goes and
// PodResizeInProgress starts over at the pod's generation) or left pending
// (Infeasible for a pod-level resources change, which podsyncd cannot apply;
// Deferred for anything the admitter refuses). A spec that matches the
// allocation clears PodResizePending (a reverted resize).
func (s *State) HandleResize(pod *corev1.Pod, admit Admitter) (Outcome, error) {
	alloc, ok := s.Allocated(pod.UID)
	if !ok {
		return Outcome{}, nil
	}
	if _, differs := ApplyAllocation(pod, alloc); !differs {
		s.ClearPending(pod.UID)
		return Outcome{}, nil
	}
	fit, reason, message := true, "", ""
	if !apiequality.Semantic.DeepEqual(pod.Spec.Resources, alloc.Pod) {
		fit, reason, message = false, corev1.PodReasonInfeasible, podLevelInfeasible
	} else if admit != nil {
		fit, reason, message = admit(pod)
	}
	if !fit {
		changed := s.SetPending(pod.UID, reason, message, pod.Generation)
		c := s.Pending(pod.UID)
		return Outcome{Pending: true, Changed: changed, Reason: c.Reason, Message: c.Message}, nil
	}
	if err := s.SetAllocated(pod); err != nil {
		return Outcome{}, err
	}
	s.ClearPending(pod.UID)
	s.ClearInProgress(pod.UID)
	s.SetInProgress(pod.UID, "", "", pod.Generation)
	return Outcome{Allocated: true}, nil
}

// InProgress is the kubelet's IsPodResizeInProgress for containers: some
// running resizable container's actuated CPU or memory request or limit
// differs from its allocation. running says whether a container runs.
func (s *State) InProgress(allocatedPod *corev1.Pod, running func(name string) bool) bool {
	check := func(c *corev1.Container) bool {
		if !running(c.Name) {
			return false
		}
		act, _ := s.Actuated(allocatedPod.UID, c.Name)
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			if !c.Resources.Requests[r].Equal(act.Requests[r]) || !c.Resources.Limits[r].Equal(act.Limits[r]) {
				return true
			}
		}
		return false
	}
	for i := range allocatedPod.Spec.InitContainers {
		if c := &allocatedPod.Spec.InitContainers[i]; IsResizable(c, true) && check(c) {
			return true
		}
	}
	for i := range allocatedPod.Spec.Containers {
		if check(&allocatedPod.Spec.Containers[i]) {
			return true
		}
	}
	return false
}

// EventMessage is the kubelet's resize event text: prefix, then the pod's
// container resources, generation and error as JSON.
func EventMessage(prefix string, pod *corev1.Pod, gen int64, errMsg string) string {
	type entry struct {
		Name      string                      `json:"name"`
		Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	}
	summary := struct {
		InitContainers []entry `json:"initContainers,omitempty"`
		Containers     []entry `json:"containers,omitempty"`
		Generation     int64   `json:"generation"`
		Error          string  `json:"error,omitempty"`
	}{Generation: gen, Error: errMsg}
	for _, c := range pod.Spec.InitContainers {
		summary.InitContainers = append(summary.InitContainers, entry{c.Name, c.Resources})
	}
	for _, c := range pod.Spec.Containers {
		summary.Containers = append(summary.Containers, entry{c.Name, c.Resources})
	}
	b, err := json.Marshal(summary)
	if err != nil {
		return prefix
	}
	return fmt.Sprintf("%s: %s", prefix, b)
}
