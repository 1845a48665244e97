package podstatus

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/podutil"
)

// The kubelet's active-deadline verdict (pkg/kubelet/active_deadline.go):
// the pod's status reason and message, also the Normal event's.
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	MessageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// DeadlineLeft is how long a pod that started at start may still be active
// under spec.activeDeadlineSeconds: zero or less once the deadline has
// passed. ok is false when no deadline applies (none set, or the pod has not
// started).
func DeadlineLeft(pod *corev1.Pod, start *metav1.Time, now time.Time) (left time.Duration, ok bool) {
	if pod.Spec.ActiveDeadlineSeconds == nil || start.IsZero() {
		return 0, false
	}
	allowed := time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second
	return allowed - now.Sub(start.Time), true
}

// applyDeadline fails a pod that has been active longer than its
// activeDeadlineSeconds, counted from status.startTime, as the kubelet's
// active-deadline sync handler does: phase Failed, reason DeadlineExceeded.
// A pod that already finished for another reason keeps its verdict.
func applyDeadline(in Input, st *corev1.PodStatus) {
	if p := in.Previous; p != nil && podutil.IsTerminal(p.Phase) && p.Reason != ReasonDeadlineExceeded {
		return
	}
	if left, ok := DeadlineLeft(in.Pod, st.StartTime, in.Now); !ok || left > 0 {
		return
	}
	st.Phase, st.Reason, st.Message = corev1.PodFailed, ReasonDeadlineExceeded, MessageDeadlineExceeded
}
