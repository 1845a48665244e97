package podstatus

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
	"github.com/microlet/microlet/services/podsyncd/internal/resources"
)

// Input is everything Generate needs.
type Input struct {
	Pod     *corev1.Pod
	Runtime *podruntime.PodStatus
	// Reasons are remembered waiting reasons by container name.
	Reasons map[string]podruntime.Reason
	// ContainerID formats runtime IDs ("docker://<id>").
	ContainerID func(string) string
	// Terminal is set once the pod worker has finished the pod.
	Terminal bool
	// HostIPs of the node.
	HostIPs []string
	// Now stamps new conditions.
	Now time.Time
	// Previous is the last status generated, to keep transition times.
	Previous *corev1.PodStatus
	// Probes says whether running containers are started and ready; nil
	// counts every running container as both.
	Probes Probes
	// ResizeConditions are the pod's PodResizePending and
	// PodResizeInProgress conditions; a terminal pod shows none.
	ResizeConditions []corev1.PodCondition
	// RecursiveReadOnly says whether the pod's runtime handler makes
	// recursive read-only mounts, for the statuses' volumeMounts.
	RecursiveReadOnly bool
}

// Probes are the prober's verdicts on running container instances.
type Probes interface {
	Started(c *corev1.Container, id string) bool
	Ready(c *corev1.Container, id string) bool
}

// Generate builds the API status.
func Generate(in Input) corev1.PodStatus {
	pod := in.Pod
	// The status reflects this generation of the spec (the kubelet's
	// PodObservedGenerationTracking, GA in 1.35).
	st := corev1.PodStatus{QOSClass: resources.QOSClass(pod), ObservedGeneration: pod.Generation}
	if sb := in.Runtime.ReadySandbox(); sb != nil && !pod.Spec.HostNetwork {
		st.PodIP = sb.IP
		for _, ip := range sb.IPs {
			st.PodIPs = append(st.PodIPs, corev1.PodIP{IP: ip})
		}
	}
	if len(in.HostIPs) > 0 {
		st.HostIP = in.HostIPs[0]
		for _, ip := range in.HostIPs {
			st.HostIPs = append(st.HostIPs, corev1.HostIP{IP: ip})
		}
		if pod.Spec.HostNetwork {
			st.PodIP = st.HostIP
			st.PodIPs = []corev1.PodIP{{IP: st.HostIP}}
		}
	}
	if in.Previous != nil && in.Previous.StartTime != nil {
		st.StartTime = in.Previous.StartTime
	} else if pod.Status.StartTime != nil {
		// Reported before podsyncd restarted: the pod started then.
		st.StartTime = pod.Status.StartTime
	} else if len(in.Runtime.Sandboxes) > 0 || len(in.Runtime.Containers) > 0 {
		t := metav1.NewTime(in.Now.Truncate(time.Second))
		st.StartTime = &t
	}
	st.InitContainerStatuses = containerStatuses(in, pod.Spec.InitContainers, true)
	st.ContainerStatuses = containerStatuses(in, pod.Spec.Containers, false)
	st.EphemeralContainerStatuses = ephemeralStatuses(in)
	st.Phase = Phase(pod, st.InitContainerStatuses, st.ContainerStatuses)
	// A static pod keeps the phase its containers give it, as the
	// kubelet's (kubernetes#116484): it is not finished for good, since its
	// manifest may come back with the same UID and start it again.
	if in.Terminal && !podsource.IsStatic(pod) && st.Phase != corev1.PodSucceeded && st.Phase != corev1.PodFailed {
		st.Phase = corev1.PodFailed
		if allSucceeded(st.ContainerStatuses) {
			st.Phase = corev1.PodSucceeded
		}
	}
	keepStoppedIPs(in, &st)
	applyDeadline(in, &st)
	st.Conditions = conditions(in, &st)
	if st.Phase != corev1.PodSucceeded && st.Phase != corev1.PodFailed && len(in.ResizeConditions) > 0 {
		st.Conditions = append(append([]corev1.PodCondition{}, in.ResizeConditions...), st.Conditions...)
	}
	return st
}

// ephemeralStatuses are the statuses of the ephemeral containers, as the
// kubelet reports them: never restarted, so an exited one stays terminated;
// no probes, so never ready (started unset); waiting for their first start
// with PodInitializing when the pod has init containers, else
// ContainerCreating, or the reason their start failed. They count for
// neither the phase nor the conditions. A status that was terminated (in
// the API's copy or the last one generated) stays as it was when the
// runtime no longer shows the exited instance: the kubelet starts from the
// old terminated status, and the API server refuses any ephemeral status
// leaving the terminated state, which would block every later status.
func ephemeralStatuses(in Input) []corev1.ContainerStatus {
	if len(in.Pod.Spec.EphemeralContainers) == 0 {
		return nil
	}
	specs := make([]corev1.Container, 0, len(in.Pod.Spec.EphemeralContainers))
	for i := range in.Pod.Spec.EphemeralContainers {
		specs = append(specs, corev1.Container(in.Pod.Spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	out := containerStatuses(in, specs, false)
	for i := range out {
		cs := &out[i]
		cs.Ready, cs.Started = false, nil
		latest := in.Runtime.Latest(cs.Name)
		switch {
		case latest == nil:
			if _, ok := in.Reasons[cs.Name]; !ok {
				cs.State.Waiting.Reason = "ContainerCreating"
				if len(in.Pod.Spec.InitContainers) > 0 {
					cs.State.Waiting.Reason = "PodInitializing"
				}
			}
		case latest.State == podruntime.StateExited:
			cs.State = corev1.ContainerState{Terminated: terminated(in, latest)}
			cs.LastTerminationState = corev1.ContainerState{}
			continue
		}
		for _, old := range []*corev1.PodStatus{&in.Pod.Status, in.Previous} {
			if o := previousStatus(old, cs.Name); o != nil && o.State.Terminated != nil {
				*cs = *o.DeepCopy()
				break
			}
		}
	}
	return out
}

func allSucceeded(cs []corev1.ContainerStatus) bool {
	for _, c := range cs {
		if c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
			return false
		}
	}
	return len(cs) > 0
}

func containerStatuses(in Input, specs []corev1.Container, init bool) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for i := range specs {
		c := &specs[i]
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, VolumeMounts: volumeMounts(c, in.RecursiveReadOnly)}
		latest := in.Runtime.Latest(c.Name)
		reason, hasReason := in.Reasons[c.Name]
		if latest != nil {
			cs.ContainerID = in.ContainerID(latest.ID)
			cs.ImageID = latest.ImageRef
			cs.User = latest.User
			cs.RestartCount = int32(latest.Attempt)
			setResources(&cs, c, latest, previousStatus(in.Previous, c.Name))
			switch latest.State {
			case podruntime.StateRunning:
				cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(latest.StartedAt)}
				started, ready := true, true
				if in.Probes != nil {
					started, ready = in.Probes.Started(c, latest.ID), in.Probes.Ready(c, latest.ID)
				}
				// A regular (non-sidecar) init container is ready only once
				// it has exited 0, never while it runs: the kubelet's prober
				// manager sets Ready for them from the terminated state alone,
				// and Initialized lists a running one as incomplete.
				if init && !podutil.IsSidecar(c) {
					ready = false
				}
				cs.Started = &started
				cs.Ready = ready
			case podruntime.StateExited:
				term := terminated(in, latest)
				if hasReason || restarting(in.Pod, c, latest, init) && !in.Terminal {
					cs.LastTerminationState.Terminated = term
					w := &corev1.ContainerStateWaiting{Reason: reason.Reason, Message: reason.Message}
					if !hasReason {
						w.Reason = "ContainerCreating"
					}
					cs.State.Waiting = w
				} else {
					cs.State.Terminated = term
					// A finished (non-sidecar) init container is ready,
					// as the kubelet's prober manager reports it.
					if init && !podutil.IsSidecar(c) && term.ExitCode == 0 {
						cs.Ready = true
					}
				}
				started := false
				cs.Started = &started
			default:
				// Created but not running: the last sync's error, if any,
				// says why (RunContainerError when the start failed, then
				// CrashLoopBackOff), as the kubelet's reason cache does.
				cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
				if hasReason {
					cs.State.Waiting.Reason, cs.State.Waiting.Message = reason.Reason, reason.Message
				}
				started := false
				cs.Started = &started
			}
			if cs.LastTerminationState.Terminated == nil && latest.State != podruntime.StateExited {
				if prev := in.Runtime.Previous(c.Name); prev != nil && prev.State == podruntime.StateExited {
					cs.LastTerminationState.Terminated = terminated(in, prev)
				}
			}
		} else {
			// The kubelet's default waiting state: PodInitializing for
			// every container (init ones too) of a pod with init
			// containers, ContainerCreating otherwise.
			w := &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
			if len(in.Pod.Spec.InitContainers) > 0 {
				w.Reason = "PodInitializing"
			}
			if hasReason {
				w.Reason, w.Message = reason.Reason, reason.Message
			}
			cs.State.Waiting = w
			started := false
			cs.Started = &started
		}
		out = append(out, cs)
	}
	return out
}

// volumeMounts are a container's volumeMounts as its status reports them
// (the kubelet does so with the RecursiveReadOnlyMounts gate, GA and locked
// on): a read-only one says whether it is recursively read-only, as
// resolved for the pod's runtime handler; one that cannot be resolved
// (the container then waits with CreateContainerConfigError) says
// Disabled, as the kubelet's does.
func volumeMounts(c *corev1.Container, rroSupported bool) []corev1.VolumeMountStatus {
	var out []corev1.VolumeMountStatus
	for i := range c.VolumeMounts {
		vm := &c.VolumeMounts[i]
		st := corev1.VolumeMountStatus{Name: vm.Name, MountPath: vm.MountPath, ReadOnly: vm.ReadOnly}
		if vm.ReadOnly {
			mode := corev1.RecursiveReadOnlyDisabled
			if rro, err := podruntime.ResolveRecursiveReadOnly(vm, rroSupported); err == nil && rro {
				mode = corev1.RecursiveReadOnlyEnabled
			}
			st.RecursiveReadOnly = &mode
		}
		out = append(out, st)
	}
	return out
}

func restarting(pod *corev1.Pod, c *corev1.Container, cs *podruntime.ContainerStatus, init bool) bool {
	if c.RestartPolicy != nil {
		switch *c.RestartPolicy {
		case corev1.ContainerRestartPolicyAlways:
			return true
		case corev1.ContainerRestartPolicyOnFailure:
			return cs.ExitCode != 0
		default:
			return false
		}
	}
	// An init container runs to completion once: under Always and
	// OnFailure it is run again only after a failure.
	if init {
		return pod.Spec.RestartPolicy != corev1.RestartPolicyNever && cs.ExitCode != 0
	}
	switch pod.Spec.RestartPolicy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return cs.ExitCode != 0
	}
	return true
}

func terminated(in Input, c *podruntime.ContainerStatus) *corev1.ContainerStateTerminated {
	t := &corev1.ContainerStateTerminated{
		ExitCode:    c.ExitCode,
		Reason:      c.Reason,
		Message:     c.Message,
		StartedAt:   metav1.NewTime(c.StartedAt),
		FinishedAt:  metav1.NewTime(c.FinishedAt),
		ContainerID: in.ContainerID(c.ID),
	}
	if t.Reason == "" {
		t.Reason = "Error"
		if c.ExitCode == 0 {
			t.Reason = "Completed"
		}
	}
	return t
}

// Phase is upstream's getPhase.
func Phase(pod *corev1.Pod, initStatuses, statuses []corev1.ContainerStatus) corev1.PodPhase {
	pendingInit := false
	for i, s := range initStatuses {
		spec := &pod.Spec.InitContainers[i]
		if podutil.IsSidecar(spec) {
			if s.State.Running == nil {
				pendingInit = true
			}
			continue
		}
		switch {
		case s.State.Running != nil:
			pendingInit = true
		case s.State.Terminated != nil:
			if s.State.Terminated.ExitCode != 0 {
				if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
					return corev1.PodFailed
				}
				pendingInit = true
			}
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated != nil && s.LastTerminationState.Terminated.ExitCode == 0 {
				continue
			}
			pendingInit = true
		default:
			pendingInit = true
		}
	}
	var running, waiting, stopped, succeeded int
	for _, s := range statuses {
		switch {
		case s.State.Running != nil:
			running++
		case s.State.Terminated != nil:
			stopped++
			if s.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case s.State.Waiting != nil:
			if s.LastTerminationState.Terminated != nil {
				stopped++
			} else {
				waiting++
			}
		default:
			waiting++
		}
	}
	switch {
	case pendingInit:
		return corev1.PodPending
	case waiting > 0:
		return corev1.PodPending
	case running > 0:
		return corev1.PodRunning
	case stopped > 0:
		if pod.Spec.RestartPolicy == corev1.RestartPolicyAlways {
			return corev1.PodRunning
		}
		if stopped == succeeded {
			return corev1.PodSucceeded
		}
		if pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			return corev1.PodFailed
		}
		return corev1.PodRunning
	default:
		return corev1.PodPending
	}
}

func conditions(in Input, st *corev1.PodStatus) []corev1.PodCondition {
	now := metav1.NewTime(in.Now.Truncate(time.Second))
	prev := map[corev1.PodConditionType]corev1.PodCondition{}
	if in.Previous != nil {
		for _, c := range in.Previous.Conditions {
			prev[c.Type] = c
		}
	}
	mk := func(t corev1.PodConditionType, ok bool, reason string) corev1.PodCondition {
		s := corev1.ConditionFalse
		if ok {
			s = corev1.ConditionTrue
			reason = ""
		}
		c := corev1.PodCondition{Type: t, Status: s, Reason: reason, LastTransitionTime: now, ObservedGeneration: in.Pod.Generation}
		if p, found := prev[t]; found && p.Status == s {
			c.LastTransitionTime = p.LastTransitionTime
		}
		return c
	}
	terminal := podutil.IsTerminal(st.Phase)
	sandboxReady := in.Runtime.ReadySandbox() != nil && !terminal
	// Ready is ContainersReady here: statusd judges the readiness gates,
	// whose conditions others write.
	cr := podutil.ContainersReadyCondition(in.Pod, st)
	containersReady, readyReason, readyMessage := cr.Status == corev1.ConditionTrue, cr.Reason, cr.Message
	init := mk(corev1.PodInitialized, true, "")
	if ok, reason, msg := initialized(in.Pod, st); !ok || reason != "" {
		init = mk(corev1.PodInitialized, ok, "")
		init.Reason, init.Message = reason, msg
	}
	return []corev1.PodCondition{
		mk(corev1.PodReadyToStartContainers, sandboxReady, ""),
		init,
		withMessage(mk(corev1.ContainersReady, containersReady, readyReason), readyMessage),
		withMessage(mk(corev1.PodReady, containersReady, readyReason), readyMessage),
		mk(corev1.PodScheduled, true, ""),
	}
}

// withMessage sets a False condition's message.
func withMessage(c corev1.PodCondition, msg string) corev1.PodCondition {
	if c.Status == corev1.ConditionFalse {
		c.Message = msg
	}
	return c
}

// initialized is the kubelet's Initialized condition: every init container
// done (a regular one Ready, a sidecar started), or any app container already
// running or terminated, or the pod Succeeded (reason PodCompleted); else
// False, ContainersNotInitialized, naming the containers not done.
func initialized(pod *corev1.Pod, st *corev1.PodStatus) (ok bool, reason, message string) {
	if len(pod.Spec.InitContainers) == 0 {
		return true, "", ""
	}
	byName := map[string]*corev1.ContainerStatus{}
	for i := range st.InitContainerStatuses {
		byName[st.InitContainerStatuses[i].Name] = &st.InitContainerStatuses[i]
	}
	var unknown, incomplete []string
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		cs, found := byName[c.Name]
		switch {
		case !found:
			unknown = append(unknown, c.Name)
		case podutil.IsSidecar(c):
			if cs.Started == nil || !*cs.Started {
				incomplete = append(incomplete, c.Name)
			}
		case !cs.Ready:
			incomplete = append(incomplete, c.Name)
		}
	}
	if st.Phase == corev1.PodSucceeded && len(unknown) == 0 {
		return true, "PodCompleted", ""
	}
	for _, cs := range st.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return true, "", ""
		}
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with unknown status: %s", unknown))
	}
	if len(incomplete) > 0 {
		msgs = append(msgs, fmt.Sprintf("containers with incomplete status: %s", incomplete))
	}
	if len(msgs) > 0 {
		return false, "ContainersNotInitialized", strings.Join(msgs, ", ")
	}
	return true, "", ""
}

// keepStoppedIPs keeps the pod IPs of a terminating or terminal pod whose
// sandbox is no longer ready: the kubelet carries the IPs it saw before
// stopping the pod into the status it sends after termination, so the pod
// keeps podIP and podIPs until it is gone. They come from the last status
// generated, or the API's copy after a podsyncd restart.
func keepStoppedIPs(in Input, st *corev1.PodStatus) {
	if len(st.PodIPs) > 0 || in.Pod.Spec.HostNetwork {
		return
	}
	if !in.Terminal && in.Pod.DeletionTimestamp == nil && st.Phase != corev1.PodSucceeded && st.Phase != corev1.PodFailed {
		return
	}
	old := &in.Pod.Status
	if in.Previous != nil && len(in.Previous.PodIPs) > 0 {
		old = in.Previous
	}
	if len(old.PodIPs) == 0 {
		return
	}
	st.PodIPs = append([]corev1.PodIP(nil), old.PodIPs...)
	st.PodIP = st.PodIPs[0].IP
}
