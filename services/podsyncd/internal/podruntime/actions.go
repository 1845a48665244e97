package podruntime

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/podutil"
)

// Actions is what SyncPod must do for a pod (the kubelet's podActions).
type Actions struct {
	// KillPod stops everything and (with CreateSandbox) starts over.
	KillPod bool
	// CreateSandbox creates a new sandbox with SandboxAttempt.
	CreateSandbox  bool
	SandboxID      string
	SandboxAttempt uint32
	// NextInit is the index of the init container to start next, -1 for none.
	NextInit int
	// RestartSidecars lists the restartable init containers of an
	// initialized pod to start again (exited, or killed for a failed probe
	// or a changed spec); they start before the app containers.
	RestartSidecars []int
	// InitFailed is set when an init container failed and the pod may not retry.
	InitFailed bool
	// Start lists the indexes of regular containers to start.
	Start []int
	// StartEphemeral lists the indexes of ephemeral containers to start.
	StartEphemeral []int
	// Kill maps container IDs to kill to the reason.
	Kill map[string]string
	// KillGrace overrides the grace period of some kills (a probe's
	// terminationGracePeriodSeconds).
	KillGrace map[string]*int64
	// Resize lists the in-place updates of running containers by resource
	// (memory, CPU), decreases before increases.
	Resize map[corev1.ResourceName][]ContainerUpdate
	// UpdatePodResources is set when a container restarts for a resize: the
	// pod cgroup still has to follow.
	UpdatePodResources bool
}

// restartAllowed says whether a container that exited with code may start again.
func restartAllowed(pod *corev1.Pod, c *corev1.Container, exitCode int32) bool {
	if c.RestartPolicy != nil {
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case corev1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// ComputePodActions compares the pod's spec with its runtime state.
func (m *Manager) ComputePodActions(pod *corev1.Pod, st *PodStatus) Actions {
	a := Actions{NextInit: -1, Kill: map[string]string{}}
	sb := st.ReadySandbox()
	hostNet := pod.Spec.HostNetwork
	switch {
	case sb == nil:
		a.CreateSandbox = true
		a.KillPod = len(st.Running()) > 0 || len(st.Sandboxes) > 0
		if len(st.Sandboxes) > 0 {
			a.SandboxAttempt = st.Sandboxes[0].Attempt + 1
		}
	case sb.HostNet != hostNet:
		a.CreateSandbox, a.KillPod = true, true
		a.SandboxAttempt = sb.Attempt + 1
	default:
		a.SandboxID = sb.ID
	}
	if a.CreateSandbox {
		// A new sandbox after the pod already ran to completion is not wanted.
		if len(st.Sandboxes) > 0 && pod.Spec.RestartPolicy != corev1.RestartPolicyAlways && allRegularDone(pod, st) {
			a.CreateSandbox = false
			a.KillPod = len(st.Running()) > 0
			return a
		}
		if len(pod.Spec.InitContainers) > 0 {
			a.NextInit = 0
		} else {
			for i := range pod.Spec.Containers {
				a.Start = append(a.Start, i)
			}
		}
		return a
	}

	// Ephemeral containers start even while init containers run, and only
	// once: any instance in the runtime, whatever its state, means started.
	for i := range pod.Spec.EphemeralContainers {
		if st.Latest(pod.Spec.EphemeralContainers[i].Name) == nil {
			a.StartEphemeral = append(a.StartEphemeral, i)
		}
	}

	// Init containers (upstream's computeInitContainerActions): regular
	// ones run to completion one at a time, in order. A sidecar (restartable
	// init container) must be running and started (its startup probe passed)
	// before the next init container or any app container starts, and is kept
	// running: restarted when it exits, fails its liveness or startup probe,
	// or its spec changes. Once an app container is created or running the
	// pod is initialized: finished init containers are not looked at again
	// and a restarting sidecar no longer holds the app containers back. Only
	// exited app containers (say, of a sandbox before a reboot) do not count.
	initialized := false
	for i := range pod.Spec.Containers {
		if cs := st.Latest(pod.Spec.Containers[i].Name); cs != nil && (cs.State == StateRunning || cs.State == StateCreated) {
			initialized = true
			break
		}
	}
	initDone := true
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs := st.Latest(c.Name)
		if podutil.IsSidecar(c) {
			start := cs == nil || cs.State == StateExited || cs.State == StateCreated
			if cs != nil && cs.State == StateRunning {
				if cs.Hash != HashContainer(c) {
					a.Kill[cs.ID] = fmt.Sprintf("Init container %s definition changed", c.Name)
					start = true
				} else if probe, grace, failed := m.failedProbe(c, cs.ID); failed {
					a.Kill[cs.ID] = fmt.Sprintf("Init container %s failed %s probe", c.Name, probe)
					if grace != nil {
						if a.KillGrace == nil {
							a.KillGrace = map[string]*int64{}
						}
						a.KillGrace[cs.ID] = grace
					}
					start = true
				} else if !m.computeResize(pod, c, true, cs, &a) {
					start = true // its resizePolicy asks for a restart
				}
			}
			if initialized {
				if start {
					a.RestartSidecars = append(a.RestartSidecars, i)
				}
				continue
			}
			if start {
				initDone = false
				a.NextInit = i
				break
			}
			if cs.State != StateRunning || !m.started(c, cs.ID) {
				initDone = false // wait for its startup probe
				break
			}
			continue
		}
		if initialized {
			continue
		}
		if cs == nil {
			initDone = false
			a.NextInit = i
			break
		}
		if cs.State == StateRunning || cs.State == StateCreated {
			initDone = false
			break
		}
		if cs.State == StateExited && cs.ExitCode == 0 {
			continue
		}
		initDone = false
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			// The pod is done: nothing more starts in it.
			a.InitFailed = true
			a.StartEphemeral = nil
		} else {
			a.NextInit = i
		}
		break
	}
	if !initDone {
		return a
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		cs := st.Latest(c.Name)
		switch {
		case cs == nil:
			a.Start = append(a.Start, i)
		case cs.State == StateRunning:
			if cs.Hash != HashContainer(c) {
				// Restarted whatever the restart policy, and the kill
				// message says so, as the kubelet's does.
				a.Kill[cs.ID] = fmt.Sprintf("Container %s definition changed, will be restarted", c.Name)
				a.Start = append(a.Start, i)
			} else if probe, grace, failed := m.failedProbe(c, cs.ID); failed {
				a.Kill[cs.ID] = fmt.Sprintf("Container %s failed %s probe", c.Name, probe)
				if grace != nil {
					if a.KillGrace == nil {
						a.KillGrace = map[string]*int64{}
					}
					a.KillGrace[cs.ID] = grace
				}
				// A killed container exits non-zero: OnFailure restarts it
				// too, and the kill message says so, as the kubelet's does.
				if restartAllowed(pod, c, 137) {
					a.Kill[cs.ID] += ", will be restarted"
					a.Start = append(a.Start, i)
				}
			} else if !m.computeResize(pod, c, false, cs, &a) {
				// Its resizePolicy asks for a restart, whatever the pod's
				// restart policy.
				a.Start = append(a.Start, i)
			}
		case cs.State == StateExited:
			if restartAllowed(pod, c, cs.ExitCode) {
				a.Start = append(a.Start, i)
			}
		case cs.State == StateCreated:
			// Created but never started (e.g. start failed): retry the start.
			a.Start = append(a.Start, i)
		}
	}
	return a
}

func allRegularDone(pod *corev1.Pod, st *PodStatus) bool {
	for i := range pod.Spec.Containers {
		cs := st.Latest(pod.Spec.Containers[i].Name)
		if cs == nil || cs.State != StateExited || restartAllowed(pod, &pod.Spec.Containers[i], cs.ExitCode) {
			return false
		}
	}
	return true
}
