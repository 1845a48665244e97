package logs

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Waiting reasons the kubelet explains in words rather than echoing (the
// image manager's ErrImagePull and ErrImagePullBackOff).
const (
	reasonErrImagePull     = "ErrImagePull"
	reasonImagePullBackOff = "ImagePullBackOff"
)

// containerID is a status container ID split into runtime type and the ID
// the CRI knows; String gives back the "<type>://<id>" form.
type containerID struct {
	runtime string
	id      string
}

func (c containerID) String() string { return c.runtime + "://" + c.id }

// parseContainerID splits "<type>://<id>". Anything else yields an empty
// ID, which the runtime then fails to find, as in the kubelet.
func parseContainerID(s string) (containerID, bool) {
	typ, id, ok := strings.Cut(strings.Trim(s, `"`), "://")
	if !ok || strings.Contains(id, "://") {
		return containerID{}, false
	}
	return containerID{runtime: typ, id: id}, true
}

// inSpec reports whether the pod declares a container, init container or
// ephemeral container with this name.
func inSpec(pod *corev1.Pod, name string) bool {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == name {
			return true
		}
	}
	for _, c := range pod.Spec.EphemeralContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

// findStatus looks the container up among regular, then init, then
// ephemeral container statuses.
func findStatus(st *corev1.PodStatus, name string) (*corev1.ContainerStatus, bool) {
	for _, list := range [][]corev1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			if list[i].Name == name {
				return &list[i], true
			}
		}
	}
	return nil, false
}

// selectContainer picks the status container ID whose log the request
// reads, with the kubelet's rules and messages: previous asks for the last
// terminated instance; otherwise the running one, else the terminated one
// (falling back to the instance before it when the newest never got an
// ID), else the last terminated one; a waiting container has no log yet.
func selectContainer(pod *corev1.Pod, name string, previous bool) (string, error) {
	cs, ok := findStatus(&pod.Status, name)
	if !ok {
		return "", fmt.Errorf("container %q in pod %q is not available", name, pod.Name)
	}
	last := cs.LastTerminationState.Terminated
	lastID := ""
	if last != nil {
		lastID = last.ContainerID
	}
	state := cs.State
	switch {
	case previous:
		if lastID == "" {
			return "", fmt.Errorf("previous terminated container %q in pod %q not found", name, pod.Name)
		}
		return lastID, nil
	case state.Running != nil:
		return cs.ContainerID, nil
	case state.Terminated != nil:
		if state.Terminated.ContainerID != "" {
			return state.Terminated.ContainerID, nil
		}
		if lastID != "" {
			return lastID, nil
		}
		return "", fmt.Errorf("container %q in pod %q is terminated", name, pod.Name)
	case last != nil:
		if lastID == "" {
			return "", fmt.Errorf("container %q in pod %q is terminated", name, pod.Name)
		}
		return lastID, nil
	case state.Waiting != nil:
		switch reason := state.Waiting.Reason; reason {
		case reasonErrImagePull:
			return "", fmt.Errorf("container %q in pod %q is waiting to start: image can't be pulled", name, pod.Name)
		case reasonImagePullBackOff:
			return "", fmt.Errorf("container %q in pod %q is waiting to start: trying and failing to pull image", name, pod.Name)
		default:
			return "", fmt.Errorf("container %q in pod %q is waiting to start: %v", name, pod.Name, reason)
		}
	default:
		return "", fmt.Errorf("container %q in pod %q is waiting to start - no logs yet", name, pod.Name)
	}
}
