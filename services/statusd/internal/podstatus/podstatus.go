package podstatus

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/podutil"
)

// MaxTerminationMessageBytes is the budget of termination messages for a
// whole pod, shared between its containers (upstream's 12 KiB).
const MaxTerminationMessageBytes = 12 * 1024

// ReasonStatusUnknown is set on containers that TerminatePod had to assume dead.
const ReasonStatusUnknown = "ContainerStatusUnknown"

// ErrIllegalTransition is wrapped by errors about a terminated container
// reported running again.
var ErrIllegalTransition = errors.New("illegal container state transition")

// kubeletConditions are the condition types the kubelet owns outright: its
// value replaces the API's. Everything else belongs to someone else.
var kubeletConditions = []corev1.PodConditionType{
	corev1.PodScheduled,
	corev1.PodReady,
	corev1.PodInitialized,
	corev1.ContainersReady,
	corev1.PodReadyToStartContainers,
}

// transitionTracked are the conditions whose LastTransitionTime is kept while
// their status does not change.
var transitionTracked = append(slices.Clone(kubeletConditions), corev1.DisruptionTarget)

// resizeConditions are the kubelet's in-place resize conditions: owned by
// the kubelet (absent from its status means gone), their transition times
// set by podsyncd.
var resizeConditions = []corev1.PodConditionType{corev1.PodResizePending, corev1.PodResizeInProgress}

// IsKubeletCondition reports whether the kubelet owns conditions of type t.
func IsKubeletCondition(t corev1.PodConditionType) bool {
	return slices.Contains(kubeletConditions, t) || slices.Contains(resizeConditions, t)
}

// IsSharedCondition reports whether t is written by the kubelet and by
// controllers alike (DisruptionTarget).
func IsSharedCondition(t corev1.PodConditionType) bool { return t == corev1.DisruptionTarget }

func condition(st *corev1.PodStatus, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == t {
			return &st.Conditions[i]
		}
	}
	return nil
}

// CheckTransition refuses a status in which a container that had terminated
// is no longer terminated although the pod's restart policy forbids a restart
// (Never; OnFailure after exit 0). Sidecar init containers may always restart.
// An ephemeral container never leaves the terminated state, whatever the
// policy: that is the API server's own rule, and a status breaking it would
// be refused on every retry.
func CheckTransition(old, next *corev1.PodStatus, spec *corev1.PodSpec) error {
	for _, o := range old.EphemeralContainerStatuses {
		if o.State.Terminated == nil {
			continue
		}
		for _, n := range next.EphemeralContainerStatuses {
			if n.Name == o.Name && n.State.Terminated == nil {
				return fmt.Errorf("%w: ephemeralContainerStatuses %q terminated with exit code %d may not leave the terminated state",
					ErrIllegalTransition, n.Name, o.State.Terminated.ExitCode)
			}
		}
	}
	if spec.RestartPolicy == corev1.RestartPolicyAlways {
		return nil
	}
	mayRestart := func(t *corev1.ContainerStateTerminated) bool {
		return t.ExitCode != 0 && spec.RestartPolicy == corev1.RestartPolicyOnFailure
	}
	check := func(field string, olds, news []corev1.ContainerStatus, skip func(name string) bool) error {
		for _, o := range olds {
			if o.State.Terminated == nil || mayRestart(o.State.Terminated) || skip(o.Name) {
				continue
			}
			for _, n := range news {
				if n.Name == o.Name && n.State.Terminated == nil {
					return fmt.Errorf("%w: %s %q terminated with exit code %d may not leave the terminated state under restartPolicy %s",
						ErrIllegalTransition, field, n.Name, o.State.Terminated.ExitCode, spec.RestartPolicy)
				}
			}
		}
		return nil
	}
	if err := check("containerStatuses", old.ContainerStatuses, next.ContainerStatuses, func(string) bool { return false }); err != nil {
		return err
	}
	sidecar := map[string]bool{}
	for i := range spec.InitContainers {
		if podutil.IsSidecar(&spec.InitContainers[i]) {
			sidecar[spec.InitContainers[i].Name] = true
		}
	}
	return check("initContainerStatuses", old.InitContainerStatuses, next.InitContainerStatuses, func(n string) bool { return sidecar[n] })
}

// keepTransitionTime carries a condition's LastTransitionTime over from old
// while its status is unchanged, and stamps now when it changed or is new.
func keepTransitionTime(next, old *corev1.PodStatus, t corev1.PodConditionType, now metav1.Time) {
	c := condition(next, t)
	if c == nil {
		return
	}
	if o := condition(old, t); o != nil && o.Status == c.Status {
		c.LastTransitionTime = o.LastTransitionTime
		return
	}
	c.LastTransitionTime = now
}

// Prepare applies the status manager's rules to an incoming status: the
// transition check against old (the cached status, or the pod's own status
// when nothing is cached), kept LastTransitionTimes and StartTime, a
// monotonic ObservedGeneration and normalisation. next is not modified.
func Prepare(pod *corev1.Pod, old *corev1.PodStatus, next *corev1.PodStatus, now time.Time) (corev1.PodStatus, error) {
	st := *next.DeepCopy()
	if old == nil {
		old = &corev1.PodStatus{}
	}
	if err := CheckTransition(old, &st, &pod.Spec); err != nil {
		return st, err
	}
	mnow := metav1.NewTime(now)
	for _, t := range transitionTracked {
		keepTransitionTime(&st, old, t, mnow)
	}
	switch {
	case old.StartTime != nil && !old.StartTime.IsZero():
		st.StartTime = old.StartTime.DeepCopy()
	case st.StartTime.IsZero():
		st.StartTime = &mnow
	}
	if old.ObservedGeneration > st.ObservedGeneration {
		st.ObservedGeneration = old.ObservedGeneration
	}
	Normalize(pod, &st)
	return st, nil
}

// Normalize truncates timestamps to whole seconds (what the API server
// stores), caps termination messages to the pod's share of
// MaxTerminationMessageBytes, and sorts container statuses (regular and
// ephemeral by name, init in spec order), so equal statuses compare equal.
func Normalize(pod *corev1.Pod, st *corev1.PodStatus) {
	budget := MaxTerminationMessageBytes
	if n := len(pod.Spec.Containers) + len(pod.Spec.InitContainers) + len(pod.Spec.EphemeralContainers); n > 0 {
		budget /= n
	}
	ts := func(t *metav1.Time) { *t = t.Rfc3339Copy() }
	state := func(s *corev1.ContainerState) {
		if s.Running != nil {
			ts(&s.Running.StartedAt)
		}
		if s.Terminated != nil {
			ts(&s.Terminated.StartedAt)
			ts(&s.Terminated.FinishedAt)
			if len(s.Terminated.Message) > budget {
				s.Terminated.Message = s.Terminated.Message[:budget]
			}
		}
	}
	if st.StartTime != nil {
		ts(st.StartTime)
	}
	for i := range st.Conditions {
		ts(&st.Conditions[i].LastProbeTime)
		ts(&st.Conditions[i].LastTransitionTime)
	}
	for _, list := range [][]corev1.ContainerStatus{st.ContainerStatuses, st.InitContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			state(&list[i].State)
			state(&list[i].LastTerminationState)
		}
	}
	byName := func(a, b corev1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) }
	slices.SortStableFunc(st.ContainerStatuses, byName)
	slices.SortStableFunc(st.EphemeralContainerStatuses, byName)
	order := map[string]int{}
	for i, c := range pod.Spec.InitContainers {
		order[c.Name] = i
	}
	slices.SortStableFunc(st.InitContainerStatuses, func(a, b corev1.ContainerStatus) int {
		ia, oka := order[a.Name]
		ib, okb := order[b.Name]
		switch {
		case oka && okb:
			return ia - ib
		case oka:
			return -1
		case okb:
			return 1
		}
		return 0
	})
}

// EqualByKubelet compares two normalised statuses on what the kubelet owns:
// kubelet and shared conditions by status, reason, message and observed
// generation (not times),
// and every other field except the ones controllers own (other conditions,
// resource claim statuses).
func EqualByKubelet(a, b *corev1.PodStatus) bool {
	owned := func(st *corev1.PodStatus) map[corev1.PodConditionType]corev1.PodCondition {
		m := map[corev1.PodConditionType]corev1.PodCondition{}
		for _, c := range st.Conditions {
			if IsKubeletCondition(c.Type) || IsSharedCondition(c.Type) {
				m[c.Type] = c
			}
		}
		return m
	}
	ca, cb := owned(a), owned(b)
	if len(ca) != len(cb) {
		return false
	}
	for t, x := range ca {
		y, ok := cb[t]
		if !ok || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	ac := *a.DeepCopy()
	ac.Conditions = b.Conditions
	ac.ResourceClaimStatuses = b.ResourceClaimStatuses
	ac.ExtendedResourceClaimStatus = b.ExtendedResourceClaimStatus
	ac.NodeAllocatableResourceClaimStatuses = b.NodeAllocatableResourceClaimStatuses
	return equality.Semantic.DeepEqual(&ac, b)
}

// NeedsReconcile reports whether the API copy of a pod (apiPod, for a static
// pod its mirror pod) differs from the cached status on anything the kubelet
// owns, so the status must be sent again.
func NeedsReconcile(apiPod *corev1.Pod, cached *corev1.PodStatus) bool {
	st := apiPod.Status.DeepCopy()
	Normalize(apiPod, st)
	want := cached
	if len(apiPod.Spec.ReadinessGates) > 0 {
		// What would be sent: Ready judged on the gates' conditions the
		// API shows.
		want = cached.DeepCopy()
		want.Conditions = append(want.Conditions, foreignConditions(apiPod.Status.Conditions, 0)...)
		applyReadinessGates(apiPod, want, condition(st, corev1.PodReady))
	}
	return !EqualByKubelet(st, want)
}

// CanBeDeleted reports whether the API object of a pod may be removed: it is
// being deleted, it is not a mirror pod, the API already shows a terminal
// phase, and the node has released its resources (reclaimed).
func CanBeDeleted(apiPod *corev1.Pod, reclaimed bool) bool {
	if apiPod.DeletionTimestamp == nil || podsource.IsMirror(apiPod) {
		return false
	}
	return podutil.IsTerminal(apiPod.Status.Phase) && reclaimed
}
