package kubeletmetrics

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
)

func startupPod(running bool, volumes ...corev1.Volume) *corev1.Pod {
	created := time.Unix(1000, 0)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "u1", CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{Volumes: volumes}}
	cs := corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}
	if running {
		now := metav1.NewTime(created.Add(time.Second))
		p.Status.StartTime = &now
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	return p
}

// TestStartupTracker: the SLI is creation to the watch showing the pod
// running after the loop reported it so, minus pulls (overlaps counted
// once) and init containers; stateful pods count only in the total.
func TestStartupTracker(t *testing.T) {
	for _, tc := range []struct {
		name       string
		volumes    []corev1.Volume
		wantSLI    uint64
		sli, total float64
	}{
		{"stateless", []corev1.Volume{{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}, 1, 4, 10},
		{"stateful", []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/x"}}}}, 0, 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			clk := clocktesting.NewFakeClock(time.Unix(1001, 0))
			tr := m.NewStartupTracker(clk)
			pending := startupPod(false, tc.volumes...)
			tr.ObservedPodOnWatch(pending, clk.Now()) // tracked from here
			tr.PullStarted("u1")
			tr.PullStarted("u1")
			clk.Step(2 * time.Second)
			tr.PullFinished("u1") // 1001-1003
			clk.Step(time.Second)
			tr.PullFinished("u1") // 1001-1004: together 3 s
			tr.InitContainerStarted("u1", time.Unix(1004, 0))
			tr.InitContainerFinished("u1", time.Unix(1007, 0)) // 3 s
			running := startupPod(true, tc.volumes...)
			tr.ObservedPodOnWatch(running, time.Unix(1008, 0)) // not reported running yet: nothing
			tr.StatusUpdated(running)
			tr.ObservedPodOnWatch(running, time.Unix(1010, 0))
			tr.ObservedPodOnWatch(running, time.Unix(1020, 0)) // once only
			got, err := testenv.GatherMetrics(m.Kubelet())
			if err != nil {
				t.Fatal(err)
			}
			if n := got.Count("kubelet_pod_start_total_duration_seconds", nil); n != 1 {
				t.Fatalf("total observed %d times, want 1", n)
			}
			if s := got["kubelet_pod_start_total_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); s != tc.total {
				t.Errorf("total %v s, want %v", s, tc.total)
			}
			if n := got.Count("kubelet_pod_start_sli_duration_seconds", nil); n != tc.wantSLI {
				t.Fatalf("SLI observed %d times, want %d", n, tc.wantSLI)
			}
			if tc.wantSLI == 1 {
				if s := got["kubelet_pod_start_sli_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); s != tc.sli {
					t.Errorf("SLI %v s, want %v (10 s minus 3 s of pulls and 3 s of init)", s, tc.sli)
				}
			}
		})
	}
	t.Run("not tracked", func(t *testing.T) {
		m := New()
		tr := m.NewStartupTracker(clocktesting.NewFakeClock(time.Unix(1001, 0)))
		// Already started when first seen (podsyncd restarted), and an
		// unschedulable pod: neither is measured.
		tr.ObservedPodOnWatch(startupPod(true), time.Unix(1001, 0))
		unsched := startupPod(false)
		unsched.UID = "u2"
		unsched.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse}}
		tr.ObservedPodOnWatch(unsched, time.Unix(1001, 0))
		for _, p := range []*corev1.Pod{startupPod(true), func() *corev1.Pod { p := startupPod(true); p.UID = "u2"; return p }()} {
			tr.StatusUpdated(p)
			tr.ObservedPodOnWatch(p, time.Unix(1010, 0))
		}
		got, err := testenv.GatherMetrics(m.Kubelet())
		if err != nil {
			t.Fatal(err)
		}
		if n := got.Count("kubelet_pod_start_total_duration_seconds", nil); n != 0 {
			t.Fatalf("measured %d starts, want none", n)
		}
	})
}
