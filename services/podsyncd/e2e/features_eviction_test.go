package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/promwire"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// TestLocalStorageEviction is the kubelet's local storage capacity
// isolation on a real API server and Docker: a pod filling an emptyDir
// past its sizeLimit, a pod whose container fills its writable layer past
// its ephemeral-storage limit, and a pod whose total (an emptyDir without a
// limit) exceeds the sum of its containers' limits are each evicted with
// the kubelet's message: Failed/Evicted, a Warning Evicted event, no
// DisruptionTarget condition (the kubelet sets none for these), not
// restarted despite restartPolicy Always, and counted in kubelet_evictions
// under the kubelet's signal (read through PodSyncService.GetMetrics, what
// nodeapi serves on /metrics). A pod writing within all its limits keeps
// running, and no further eviction is counted over 15 more eviction passes.
func TestLocalStorageEviction(t *testing.T) {
	s := startStackArgs(t, map[string][]string{components.PodSyncd: {
		"--eviction-monitoring-period=1s", "--volume-stats-agg-period=1s"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()

	// fill writes 4 MiB to path and stays.
	fill := func(path string) string {
		return fmt.Sprintf("dd if=/dev/zero of=%s bs=1024 count=4096 && sync && sleep 3600", path)
	}
	emptyDir := func(p *corev1.Pod, limit string) {
		ed := &corev1.EmptyDirVolumeSource{}
		if limit != "" {
			q := resource.MustParse(limit)
			ed.SizeLimit = &q
		}
		p.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: ed}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}
	}
	ephemeralLimit := func(c *corev1.Container, limit string) {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(limit)}
	}

	// Within every limit: 1 MiB into an 8 MiB emptyDir, 1 MiB into its
	// writable layer under a 16 MiB limit.
	calm := s.Pod("lsi-calm", corev1.RestartPolicyAlways,
		"dd if=/dev/zero of=/data/fill bs=1024 count=1024 && dd if=/dev/zero of=/fill bs=1024 count=1024 && sync && sleep 3600")
	emptyDir(calm, "8Mi")
	ephemeralLimit(&calm.Spec.Containers[0], "16Mi")
	s.Create(calm)
	s.WaitPod("default", "lsi-calm", "running", ready)

	overEmptyDir := s.Pod("lsi-emptydir", corev1.RestartPolicyAlways, fill("/data/fill"))
	emptyDir(overEmptyDir, "1Mi")
	// One container over its own limit, the pod well within the sum.
	overContainer := s.Pod("lsi-container", corev1.RestartPolicyAlways, "sleep 3600")
	overContainer.Spec.Containers[0].Name = "idle"
	ephemeralLimit(&overContainer.Spec.Containers[0], "100Mi")
	overContainer.Spec.Containers = append(overContainer.Spec.Containers, corev1.Container{Name: "writer", Image: s.image,
		ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"/bin/sh", "-c", fill("/fill")}})
	ephemeralLimit(&overContainer.Spec.Containers[1], "1Mi")
	// Every container within its limit (its writable layer is empty), the
	// pod's emptyDir without a sizeLimit over the pod's total.
	overPod := s.Pod("lsi-pod", corev1.RestartPolicyAlways, fill("/data/fill"))
	emptyDir(overPod, "")
	ephemeralLimit(&overPod.Spec.Containers[0], "2Mi")

	want := map[string]struct{ message, signal string }{
		"lsi-emptydir":  {`Usage of EmptyDir volume "data" exceeds the limit "1Mi". `, "emptydirfs.limit"},
		"lsi-container": {`Container writer exceeded its local ephemeral storage limit "1Mi". `, "ephemeralcontainerfs.limit"},
		"lsi-pod":       {"Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ", "ephemeralpodfs.limit"},
	}
	for _, p := range []*corev1.Pod{overEmptyDir, overContainer, overPod} {
		s.Create(p)
	}
	for name, w := range want {
		got := s.WaitPod("default", name, "evicted", isEvicted)
		if got.Status.Message != w.message {
			t.Errorf("%s: message %q, want %q", name, got.Status.Message, w.message)
		}
		if c := condition(got, corev1.DisruptionTarget); c != nil {
			t.Errorf("%s: DisruptionTarget condition %+v, want none (the kubelet sets none for local storage evictions)", name, c)
		}
		if msg := evictedEvent(s.Node, name); msg != w.message {
			t.Errorf("%s: Evicted event message %q, want %q", name, msg, w.message)
		}
	}

	evictions := func() map[string]float64 { return s.kubeletCounter(t, "kubelet_evictions", "eviction_signal") }
	first := evictions()
	for name, w := range want {
		if first[w.signal] != 1 {
			t.Errorf("kubelet_evictions{eviction_signal=%q} = %v after evicting %s, want 1 (all: %v)", w.signal, first[w.signal], name, first)
		}
	}

	// Over 15 more passes (1 s apart, with fresh volume stats, and past the
	// runtime's 10 s writable-layer refresh) nothing else is evicted: the
	// counters stay, the calm pod runs on, and the evicted pods stay Failed.
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		p, err := s.Get("default", "lsi-calm")
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("lsi-calm: phase %s reason %q message %q statuses %+v, want Running, never restarted",
				p.Status.Phase, p.Status.Reason, p.Status.Message, p.Status.ContainerStatuses)
		}
		for name := range want {
			if p, err := s.Get("default", name); err != nil || !isEvicted(p) {
				t.Fatalf("%s came back: %+v (err %v)", name, p.Status, err)
			}
		}
		time.Sleep(time.Second)
	}
	if last := evictions(); fmt.Sprint(last) != fmt.Sprint(first) {
		t.Errorf("kubelet_evictions went from %v to %v with only the calm pod left", first, last)
	}
	for _, name := range []string{"lsi-calm", "lsi-emptydir", "lsi-container", "lsi-pod"} {
		s.deletePod(name)
	}
}

// kubeletCounter reads podsyncd's kubelet metrics through its contract
// (PodSyncService.GetMetrics) and sums counter name by the value of label.
func (s *stack) kubeletCounter(t *testing.T, name, label string) map[string]float64 {
	t.Helper()
	cc, err := grpcclient.Dial(components.Endpoint(s.runDir, components.PodSyncd))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := podsyncv1.NewPodSyncServiceClient(cc).GetMetrics(ctx, &podsyncv1.GetMetricsRequest{Set: podsyncv1.MetricsSet_METRICS_SET_KUBELET})
	if err != nil {
		t.Fatalf("podsyncd GetMetrics: %v", err)
	}
	mfs, err := promwire.Decode(resp.GetFamilies())
	if err != nil {
		t.Fatalf("podsyncd GetMetrics: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, series := range mf.GetMetric() {
			for _, l := range series.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] += series.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
