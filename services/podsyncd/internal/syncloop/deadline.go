package syncloop

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/podstatus"
)

// untilDeadline shortens a pod's next sync to the moment its
// activeDeadlineSeconds runs out, so the pod fails then and not at the next
// resync (the kubelet polls every pod's deadline each second instead). A
// spec update that lowers the deadline syncs the pod at once and lands here
// again.
func (l *Loop) untilDeadline(pod *corev1.Pod, started *metav1.Time, requeue time.Duration) time.Duration {
	left, ok := podstatus.DeadlineLeft(pod, started, l.opts.Clock.Now())
	if !ok || left <= 0 {
		return requeue
	}
	if requeue == 0 || left < requeue {
		return left
	}
	return requeue
}

// deadlineEvent records the kubelet's Normal DeadlineExceeded event when a
// status first says the pod ran out of time.
func (l *Loop) deadlineEvent(pod *corev1.Pod, st *corev1.PodStatus) {
	if st.Reason != podstatus.ReasonDeadlineExceeded {
		return
	}
	if prev := l.lastStatus(pod.UID); prev != nil && prev.Reason == podstatus.ReasonDeadlineExceeded {
		return
	}
	l.log.Info("pod passed its active deadline", "pod", pod.Namespace+"/"+pod.Name, "activeDeadlineSeconds", *pod.Spec.ActiveDeadlineSeconds)
	if rec := l.rm.Recorder(); rec != nil {
		rec.Event(pod, corev1.EventTypeNormal, podstatus.ReasonDeadlineExceeded, podstatus.MessageDeadlineExceeded)
	}
}
