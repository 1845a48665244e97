package pleg

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// fakeRuntime lists what the test set; other calls panic (nil embedded).
type fakeRuntime struct {
	Runtime
	mu   sync.Mutex
	sbs  []*runtimeapi.PodSandbox
	cs   []*runtimeapi.Container
	fail bool
}

func (f *fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return nil, errors.New("runtime down")
	}
	return f.sbs, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cs, nil
}

func uidLabels(uid string) map[string]string {
	return map[string]string{kubelettypes.KubernetesPodUIDLabel: uid}
}

// TestRelistMetrics: a relist sets the running pods (a ready sandbox each)
// and containers by state, times itself, and from the second success on
// the interval; a failed relist is timed but leaves last-seen and the
// interval's reference alone.
func TestRelistMetrics(t *testing.T) {
	f := &fakeRuntime{
		sbs: []*runtimeapi.PodSandbox{
			{Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: uidLabels("a")},
			{Id: "s0", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Labels: uidLabels("a")},
			{Id: "s2", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Labels: uidLabels("b")},
			{Id: "s3", State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: uidLabels("c")},
			{Id: "x", State: runtimeapi.PodSandboxState_SANDBOX_READY}, // not a pod's
		},
		cs: []*runtimeapi.Container{
			{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: uidLabels("a")},
			{Id: "c2", State: runtimeapi.ContainerState_CONTAINER_EXITED, Labels: uidLabels("a")},
			{Id: "c3", State: runtimeapi.ContainerState_CONTAINER_EXITED, Labels: uidLabels("b")},
			{Id: "c4", State: runtimeapi.ContainerState_CONTAINER_CREATED, Labels: uidLabels("c")},
			{Id: "c5", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: uidLabels("c")},
		},
	}
	m := kubeletmetrics.New()
	var changed []types.UID
	r := New(f, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), func(uid types.UID) { changed = append(changed, uid) }, WithMetrics(m))
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := gather(t, m)
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"kubelet_running_pods", nil, 2},
		{"kubelet_running_containers", map[string]string{"container_state": "running"}, 2},
		{"kubelet_running_containers", map[string]string{"container_state": "exited"}, 2},
		{"kubelet_running_containers", map[string]string{"container_state": "created"}, 1},
		{"kubelet_running_containers", map[string]string{"container_state": "unknown"}, 0},
	} {
		if v := got.Sum(tc.name, tc.match); v != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.match, v, tc.want)
		}
	}
	seen := got.Sum("kubelet_pleg_last_seen_seconds", nil)
	if seen == 0 || got.Count("kubelet_pleg_relist_duration_seconds", nil) != 1 || got.Count("kubelet_pleg_relist_interval_seconds", nil) != 0 {
		t.Fatalf("after one relist: last seen %v, durations %d, intervals %d; want set, 1, 0", seen,
			got.Count("kubelet_pleg_relist_duration_seconds", nil), got.Count("kubelet_pleg_relist_interval_seconds", nil))
	}

	f.mu.Lock()
	f.fail = true
	f.mu.Unlock()
	if err := r.Relist(context.Background()); err == nil {
		t.Fatal("relist against a failing runtime succeeded")
	}
	got = gather(t, m)
	if got.Count("kubelet_pleg_relist_duration_seconds", nil) != 2 || got.Count("kubelet_pleg_relist_interval_seconds", nil) != 1 {
		t.Fatalf("after a failed relist: durations %d intervals %d, want 2 and 1",
			got.Count("kubelet_pleg_relist_duration_seconds", nil), got.Count("kubelet_pleg_relist_interval_seconds", nil))
	}

	// The pods go: the gauges follow; the next interval is measured from
	// the last success, not from the failure.
	f.mu.Lock()
	f.fail, f.sbs, f.cs = false, nil, nil
	f.mu.Unlock()
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	got = gather(t, m)
	if v := got.Sum("kubelet_running_pods", nil); v != 0 {
		t.Errorf("kubelet_running_pods = %v with no sandboxes", v)
	}
	if v := got.Sum("kubelet_running_containers", nil); v != 0 {
		t.Errorf("kubelet_running_containers = %v with no containers, want every state 0", v)
	}
	if got.Count("kubelet_pleg_relist_interval_seconds", nil) != 2 {
		t.Errorf("intervals %d, want 2", got.Count("kubelet_pleg_relist_interval_seconds", nil))
	}
}

func gather(t *testing.T, m *kubeletmetrics.Metrics) testenv.Metrics {
	t.Helper()
	got, err := testenv.GatherMetrics(m.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// events is a runtime with nothing to list whose GetContainerEvents, as
// cri-client's, blocks and sends on the caller's channel: one event for
// the sandbox of pod u1, then it holds the stream until ctx ends.
type events struct{ returned chan struct{} }

func (events) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return nil, nil
}

func (events) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return nil, nil
}

func (e events) GetContainerEvents(ctx context.Context, ch chan *runtimeapi.ContainerEventResponse, _ func(runtimeapi.RuntimeService_GetContainerEventsClient)) error {
	defer func() { e.returned <- struct{}{} }()
	ch <- &runtimeapi.ContainerEventResponse{PodSandboxStatus: &runtimeapi.PodSandboxStatus{Metadata: &runtimeapi.PodSandboxMetadata{Uid: "u1"}}}
	<-ctx.Done()
	return ctx.Err()
}

// An event on the stream triggers its pod; when the relister stops, the
// stream's call has returned (nothing left blocked on the channel).
func TestEventsTriggerPod(t *testing.T) {
	rt := events{returned: make(chan struct{}, 1)}
	changed := make(chan types.UID, 8)
	r := New(rt, time.Hour, slog.New(slog.NewTextHandler(io.Discard, nil)), func(uid types.UID) { changed <- uid })
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { r.Run(ctx); close(stopped) }()
	if uid := <-changed; uid != "u1" {
		t.Fatalf("changed %q, want u1", uid)
	}
	cancel()
	<-stopped
	<-rt.returned
}

// TestHolds: before a relist succeeded nothing is known; then a pod is held
// while the last successful relist saw a sandbox or a container of it, and
// a failed relist leaves the answer as the last success gave it.
func TestHolds(t *testing.T) {
	f := &fakeRuntime{
		sbs: []*runtimeapi.PodSandbox{{Id: "s1", State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: uidLabels("a")}},
		cs:  []*runtimeapi.Container{{Id: "c1", State: runtimeapi.ContainerState_CONTAINER_EXITED, Labels: uidLabels("b")}},
	}
	r := New(f, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), func(types.UID) {})
	check := func(step string, uid types.UID, held, known bool) {
		t.Helper()
		if h, k := r.Holds(uid); h != held || k != known {
			t.Errorf("%s: Holds(%s) = %v, %v; want %v, %v", step, uid, h, k, held, known)
		}
	}
	check("before any relist", "a", false, false)
	f.fail = true
	if err := r.Relist(context.Background()); err == nil {
		t.Fatal("relist of a failing runtime succeeded")
	}
	check("after a failed first relist", "a", false, false)
	f.fail = false
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("sandbox listed", "a", true, true)
	check("container listed", "b", true, true)
	check("new pod", "n", false, true)
	f.mu.Lock()
	f.sbs = nil
	f.mu.Unlock()
	f.fail = true
	_ = r.Relist(context.Background())
	check("failed relist keeps the last", "a", true, true)
	f.fail = false
	if err := r.Relist(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("sandbox gone", "a", false, true)
}
