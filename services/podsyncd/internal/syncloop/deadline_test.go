package syncloop

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestUntilDeadline(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &Loop{opts: Options{Clock: clocktesting.NewFakeClock(now)}}
	started := metav1.NewTime(now.Add(-3 * time.Second))
	pod := func(secs *int64) *corev1.Pod { return &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: secs}} }
	five, two := int64(5), int64(2)
	tests := []struct {
		name    string
		pod     *corev1.Pod
		started *metav1.Time
		requeue time.Duration
		want    time.Duration
	}{
		{"no deadline keeps the requeue", pod(nil), &started, 7 * time.Second, 7 * time.Second},
		{"not started", pod(&five), nil, 0, 0},
		{"deadline sooner than the requeue", pod(&five), &started, 10 * time.Second, 2 * time.Second},
		{"deadline alone", pod(&five), &started, 0, 2 * time.Second},
		{"requeue sooner", pod(&five), &started, time.Second, time.Second},
		{"already past: the sync fails it, no timer", pod(&two), &started, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.untilDeadline(tc.pod, tc.started, tc.requeue); got != tc.want {
				t.Fatalf("requeue = %v, want %v", got, tc.want)
			}
		})
	}
}
