package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// TestPodEmptyDirSizeLimit fills a disk-backed emptyDir past its sizeLimit
// and expects the kubelet's local-storage eviction: the pod ends Failed with
// reason Evicted, the eviction manager's message, a DisruptionTarget
// condition and an Evicted event, and is not restarted despite its restart
// policy. A pod writing as much into an emptyDir without a limit keeps
// running.
func TestPodEmptyDirSizeLimit(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()

	const fill = "dd if=/dev/zero of=/data/fill bs=1024 count=4096 && sync && sleep 3600"
	withVolume := func(name string, limit *resource.Quantity) *corev1.Pod {
		p := s.Pod(name, corev1.RestartPolicyAlways, fill)
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: limit}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
		return p
	}
	limit := resource.MustParse("1Mi")
	s.Create(withVolume("unlimited", nil))
	s.Create(withVolume("limited", &limit))

	got := s.WaitPod("default", "limited", "evicted", func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted"
	})
	wantMsg := `Usage of EmptyDir volume "data" exceeds the limit "1Mi". `
	if got.Status.Message != wantMsg {
		t.Errorf("message = %q, want %q", got.Status.Message, wantMsg)
	}
	if c := condition(got, corev1.DisruptionTarget); c == nil || c.Status != corev1.ConditionTrue || c.Reason != "TerminationByKubelet" {
		t.Errorf("DisruptionTarget condition = %+v, want True/TerminationByKubelet", c)
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.State.Running != nil {
			t.Errorf("container %s still running after eviction: %+v", cs.Name, cs.State)
		}
	}

	s.Eventually("Evicted event for default/limited", 2*time.Minute, func() (bool, string) {
		evs, err := s.admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": "limited", "reason": "Evicted"}.String(),
		})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "exceeds the limit") {
				return true, ""
			}
		}
		return false, "no Warning Evicted event yet"
	})

	// The other pod wrote the same 4 MiB without a limit: it keeps running,
	// and the evicted one stays Failed (its restart policy does not apply).
	other := s.WaitPod("default", "unlimited", "running", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if other.Status.Phase != corev1.PodRunning {
		t.Errorf("unlimited pod phase = %s, want Running", other.Status.Phase)
	}
	again, err := s.Get("default", "limited")
	if err != nil {
		t.Fatal(err)
	}
	if again.Status.Phase != corev1.PodFailed || again.Status.Reason != "Evicted" {
		t.Errorf("evicted pod came back: phase=%s reason=%s", again.Status.Phase, again.Status.Reason)
	}
	s.deletePod("limited")
	s.deletePod("unlimited")
}
