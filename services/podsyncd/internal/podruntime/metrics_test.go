package podruntime

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// startRuntime creates sandboxes (or fails to) and knows no image; other
// calls panic (nil embedded).
type startRuntime struct {
	criapi.RuntimeService
	criapi.ImageManagerService
	failSandbox bool
}

func (f *startRuntime) Close(context.Context) error { return nil }

func (f *startRuntime) RunPodSandbox(context.Context, *runtimeapi.PodSandboxConfig, string) (string, error) {
	if f.failSandbox {
		return "", errors.New("no network")
	}
	return "sb-new", nil
}

func (f *startRuntime) ImageStatus(context.Context, *runtimeapi.ImageSpec, bool) (*runtimeapi.ImageStatusResponse, error) {
	return &runtimeapi.ImageStatusResponse{}, nil
}

// TestStartMetrics: a sandbox about to be created counts as a started pod
// and its failure as an error; a container attempt counts under its type
// and its failure under its waiting reason.
func TestStartMetrics(t *testing.T) {
	count := func(m *kubeletmetrics.Metrics, name string, match map[string]string) float64 {
		got, err := testenv.GatherMetrics(m.Kubelet())
		if err != nil {
			t.Fatal(err)
		}
		return got.Sum(name, match)
	}
	t.Run("sandbox fails", func(t *testing.T) {
		m := kubeletmetrics.New()
		rt := &startRuntime{failSandbox: true}
		mgr := NewManager(rt, rt, Options{LogRoot: t.TempDir(), Metrics: m})
		res := mgr.SyncPod(context.Background(), testPod(corev1.RestartPolicyAlways, 0), &PodStatus{UID: "u1"})
		if res.Err() == nil {
			t.Fatal("SyncPod succeeded without a sandbox")
		}
		if s, e := count(m, "kubelet_started_pods_total", nil), count(m, "kubelet_started_pods_errors_total", nil); s != 1 || e != 1 {
			t.Fatalf("started_pods_total %v, errors %v; want 1 and 1", s, e)
		}
		if n := count(m, "kubelet_started_containers_total", nil); n != 0 {
			t.Fatalf("started_containers_total %v without a sandbox", n)
		}
	})
	for _, tc := range []struct {
		name  string
		inits int
		label string
		want  float64
	}{
		{"containers fail on their image", 0, "container", 2},
		{"the first init container fails on its image", 1, "init_container", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := kubeletmetrics.New()
			rt := &startRuntime{}
			mgr := NewManager(rt, rt, Options{LogRoot: t.TempDir(), Metrics: m})
			pod := testPod(corev1.RestartPolicyAlways, tc.inits)
			for i := range pod.Spec.Containers {
				pod.Spec.Containers[i].ImagePullPolicy = corev1.PullNever
			}
			for i := range pod.Spec.InitContainers {
				pod.Spec.InitContainers[i].ImagePullPolicy = corev1.PullNever
			}
			mgr.SyncPod(context.Background(), pod, &PodStatus{UID: "u1"})
			if s, e := count(m, "kubelet_started_pods_total", nil), count(m, "kubelet_started_pods_errors_total", nil); s != 1 || e != 0 {
				t.Fatalf("started_pods_total %v, errors %v; want 1 and 0", s, e)
			}
			if n := count(m, "kubelet_started_containers_total", map[string]string{"container_type": tc.label}); n != tc.want {
				t.Errorf("started_containers_total{%s} = %v, want %v", tc.label, n, tc.want)
			}
			if n := count(m, "kubelet_started_containers_errors_total", map[string]string{"container_type": tc.label, "code": ReasonErrImageNeverPull}); n != tc.want {
				t.Errorf("started_containers_errors_total{%s,ErrImageNeverPull} = %v, want %v", tc.label, n, tc.want)
			}
		})
	}
}

// TestInitTimesForStartupSLI: finished init containers (not sidecars) are
// handed to the startup tracker with their finish time.
func TestInitTimesForStartupSLI(t *testing.T) {
	m := kubeletmetrics.New()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	tr := m.NewStartupTracker(clk)
	pod := testPod(corev1.RestartPolicyAlways, 1)
	pod.CreationTimestamp = metav1.NewTime(time.Unix(1000, 0))
	always := corev1.ContainerRestartPolicyAlways
	pod.Spec.InitContainers = append(pod.Spec.InitContainers, corev1.Container{Name: "sidecar", Image: "img", RestartPolicy: &always})
	tr.ObservedPodOnWatch(pod, clk.Now())
	tr.InitContainerStarted(pod.UID, time.Unix(1001, 0))
	mgr := NewManager(nil, nil, Options{Startup: tr})
	st := &PodStatus{Containers: []ContainerStatus{
		{ID: "i0", Name: "init0", State: StateExited, FinishedAt: time.Unix(1006, 0)},
		{ID: "s", Name: "sidecar", State: StateExited, FinishedAt: time.Unix(1009, 0)},
	}}
	mgr.initTimes(pod, st)
	running := pod.DeepCopy()
	started := metav1.NewTime(time.Unix(1007, 0))
	running.Status.StartTime = &started
	running.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}
	tr.StatusUpdated(running)
	tr.ObservedPodOnWatch(running, time.Unix(1010, 0))
	got, err := testenv.GatherMetrics(m.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	if s := got["kubelet_pod_start_sli_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); s != 5 {
		t.Fatalf("SLI %v s, want 10 minus init0's 5 (the sidecar does not count)", s)
	}
}
