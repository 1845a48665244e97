package syncloop

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
	"github.com/microlet/microlet/services/podsyncd/internal/podworkers"
)

func kubelet(t *testing.T, m *kubeletmetrics.Metrics) testenv.Metrics {
	t.Helper()
	got, err := testenv.GatherMetrics(m.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestObserveStart: kubelet_pod_start_duration_seconds is observed once,
// when a pod first goes from Pending to Running, from its first sighting.
func TestObserveStart(t *testing.T) {
	now := time.Unix(2000, 0)
	seen := now.Add(-4 * time.Second)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		podsource.FirstSeenAnnotation: seen.Format(time.RFC3339Nano)}}}
	unseen := &corev1.Pod{}
	st := func(p corev1.PodPhase) *corev1.PodStatus { return &corev1.PodStatus{Phase: p} }
	for _, tc := range []struct {
		name           string
		pod            *corev1.Pod
		prev, pre, pos *corev1.PodStatus
		want           uint64
	}{
		{"first sync starts it", pod, nil, st(corev1.PodPending), st(corev1.PodRunning), 1},
		{"a later sync starts it", pod, st(corev1.PodPending), st(corev1.PodPending), st(corev1.PodRunning), 1},
		{"still pending", pod, nil, st(corev1.PodPending), st(corev1.PodPending), 0},
		{"already running", pod, st(corev1.PodRunning), st(corev1.PodRunning), st(corev1.PodRunning), 0},
		{"adopted after a restart", pod, nil, st(corev1.PodRunning), st(corev1.PodRunning), 0},
		{"never seen by a source", unseen, nil, st(corev1.PodPending), st(corev1.PodRunning), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := kubeletmetrics.New()
			l := &Loop{opts: Options{Clock: clocktesting.NewFakeClock(now), Metrics: m}}
			l.observeStart(tc.pod, tc.prev, tc.pre, tc.pos)
			got := kubelet(t, m)
			if n := got.Count("kubelet_pod_start_duration_seconds", nil); n != tc.want {
				t.Fatalf("observations = %d, want %d", n, tc.want)
			}
			if tc.want == 1 {
				if s := got["kubelet_pod_start_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); s != 4 {
					t.Fatalf("duration %v, want 4 s since config.seen", s)
				}
			}
		})
	}
}

// emptyRuntime has no pods and cannot create any; other calls panic.
type emptyRuntime struct {
	criapi.RuntimeService
	criapi.ImageManagerService
}

func (emptyRuntime) Close(context.Context) error { return nil }

func (emptyRuntime) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return nil, nil
}

func (emptyRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return nil, nil
}

func (emptyRuntime) RunPodSandbox(context.Context, *runtimeapi.PodSandboxConfig, string) (string, error) {
	return "", errors.New("no sandboxes here")
}

type refuse struct{}

func (refuse) Admit() (bool, string, string) { return false, "NodeShutdown", "shutting down" }

func testLoop(t *testing.T, opts Options) *Loop {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt := emptyRuntime{}
	rm := podruntime.NewManager(rt, rt, podruntime.Options{LogRoot: t.TempDir(), Log: log})
	return New(log, rm, rt, nil, nil, nil, opts)
}

// TestAdmissionRejectionCounted: a refused pod counts under its reason.
func TestAdmissionRejectionCounted(t *testing.T) {
	m := kubeletmetrics.New()
	l := testLoop(t, Options{Shutdown: refuse{}, Metrics: m})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}}
	if l.admit(pod) {
		t.Fatal("admitted while the node shuts down")
	}
	if n := kubelet(t, m).Sum("kubelet_admission_rejections_total", map[string]string{"reason": "NodeShutdown"}); n != 1 {
		t.Fatalf("kubelet_admission_rejections_total{reason=NodeShutdown} = %v, want 1", n)
	}
}

// TestRestartedPodCounted: a static pod removed from its source and added
// again under the same UID counts as restarted, once.
func TestRestartedPodCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := kubeletmetrics.New()
	l := testLoop(t, Options{Metrics: m})
	l.workers = podworkers.New(ctx, l, l.log, time.Hour)
	defer l.workers.Wait()
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-n", Namespace: "ns", UID: "u-static",
		Annotations: map[string]string{podsource.SourceAnnotation: podsource.FileSource}}}
	l.Add(pod)
	l.Remove(pod)
	testenv.Eventually(t, "the removed pod's worker gone", 30*time.Second, func() error {
		if l.workers.Has(pod.UID) {
			return errors.New("worker still there")
		}
		return nil
	})
	if n := kubelet(t, m).Sum("kubelet_restarted_pods_total", nil); n != 0 {
		t.Fatalf("restarted_pods_total = %v before the pod came back", n)
	}
	l.Add(pod)
	l.Add(pod) // a repeated ADD is not another restart
	got := kubelet(t, m)
	if n := got.Sum("kubelet_restarted_pods_total", map[string]string{"static": "true"}); n != 1 {
		t.Fatalf("restarted_pods_total{static=true} = %v, want 1", n)
	}
}

// TestAdmissionRereadsNodeForAffinity: a pod whose node selector the
// cached Node's labels do not match is admitted when the Node read again
// from the API server matches (the kubelet's synchronous re-fetch), and
// refused when it still does not; the re-read happens only for that
// reason.
func TestAdmissionRereadsNodeForAffinity(t *testing.T) {
	node := func(color string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"color": color}},
			Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}}}
	}
	for _, tc := range []struct {
		name      string
		fresh     string
		admit     bool
		selector  map[string]string
		wantReads int
	}{
		{"relabelled", "green", true, map[string]string{"color": "green"}, 1},
		{"still not", "blue", false, map[string]string{"color": "green"}, 1},
		{"matches the cache", "green", true, map[string]string{"color": "blue"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			l := testLoop(t, Options{FreshNode: func(context.Context) (*corev1.Node, error) {
				reads++
				return node(tc.fresh), nil
			}})
			l.node = node("blue")
			l.nodeAt = l.opts.Clock.Now()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
				Spec: corev1.PodSpec{NodeSelector: tc.selector}}
			if got := l.admit(pod); got != tc.admit {
				t.Fatalf("admit = %v, want %v", got, tc.admit)
			}
			if reads != tc.wantReads {
				t.Errorf("the Node was read again %d times, want %d", reads, tc.wantReads)
			}
		})
	}
}
