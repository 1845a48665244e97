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

// TestUntilDeadlineAcrossClockSteps: activeDeadlineSeconds counts wall time
// from status.startTime, as the kubelet's does: the start time is stored in
// the API and survives restarts, so the wall clock is the only one it can be
// read against. A pod started 3 s ago with a 60 s deadline: a step forward
// of a day puts it past the deadline (no timer; the sync fails it); a step
// back of an hour moves the deadline an hour away, and one back to before
// the start time further still; the timer is never zero or negative while
// the deadline is ahead, and is zero once it is behind.
func TestUntilDeadlineAcrossClockSteps(t *testing.T) {
	now := time.Unix(100000, 0)
	clk := clocktesting.NewFakeClock(now)
	l := &Loop{opts: Options{Clock: clk}}
	started := metav1.NewTime(now.Add(-3 * time.Second))
	sixty := int64(60)
	pod := &corev1.Pod{Spec: corev1.PodSpec{ActiveDeadlineSeconds: &sixty}}
	for _, s := range []struct {
		what string
		step time.Duration
		want time.Duration
	}{
		{"3 s in", 0, 57 * time.Second},
		{"a day forward", 24 * time.Hour, 0},
		{"back from there by a day and an hour", -25 * time.Hour, time.Hour + 57*time.Second},
		{"an hour on", time.Hour, 57 * time.Second},
		{"57 s on: the deadline", 57 * time.Second, 0},
	} {
		clk.Step(s.step)
		if got := l.untilDeadline(pod, &started, 0); got != s.want {
			t.Fatalf("%s: next sync in %v, want %v", s.what, got, s.want)
		}
	}
}
