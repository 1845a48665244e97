package podworkers

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// recorder is a Handler that records calls and checks no call for one pod
// overlaps another for the same pod. A pod's next call can be held (hold)
// until the test has queued more work for the pod, so the overlap check
// covers exactly the moment a second call could start.
type recorder struct {
	mu       sync.Mutex
	calls    map[types.UID][]string
	active   map[types.UID]bool
	overlap  bool
	terminal map[types.UID]bool
	held     map[types.UID]chan struct{}
	entered  map[types.UID]chan struct{}
}

func newRecorder() *recorder {
	return &recorder{calls: map[types.UID][]string{}, active: map[types.UID]bool{}, terminal: map[types.UID]bool{},
		held: map[types.UID]chan struct{}{}, entered: map[types.UID]chan struct{}{}}
}

// hold makes uid's next call wait, once it has started, until release;
// entered closes when it has started.
func (r *recorder) hold(uid types.UID) (entered <-chan struct{}, release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held[uid], r.entered[uid] = make(chan struct{}), make(chan struct{})
	held := r.held[uid]
	return r.entered[uid], func() { close(held) }
}

func (r *recorder) enter(uid types.UID, what string) func() {
	r.mu.Lock()
	if r.active[uid] {
		r.overlap = true
	}
	r.active[uid] = true
	r.calls[uid] = append(r.calls[uid], what)
	held, entered := r.held[uid], r.entered[uid]
	delete(r.held, uid)
	delete(r.entered, uid)
	r.mu.Unlock()
	if held != nil {
		close(entered)
		<-held
	}
	return func() {
		r.mu.Lock()
		r.active[uid] = false
		r.mu.Unlock()
	}
}

func (r *recorder) SyncPod(_ context.Context, pod *corev1.Pod) (bool, time.Duration, error) {
	defer r.enter(pod.UID, "sync")()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.terminal[pod.UID], 0, nil
}

func (r *recorder) SyncTerminatingPod(_ context.Context, pod *corev1.Pod, _ *int64) error {
	defer r.enter(pod.UID, "terminating")()
	return nil
}

func (r *recorder) SyncTerminatedPod(_ context.Context, pod *corev1.Pod, remove bool) error {
	what := "terminated"
	if remove {
		what = "terminated+remove"
	}
	defer r.enter(pod.UID, what)()
	return nil
}

func (r *recorder) get(uid types.UID) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls[uid]...)
}

func pod(uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: uid, Namespace: "default"}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 30*time.Second, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

func TestLifecycle(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRecorder()
	w := New(ctx, r, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)

	// A pod synced many times, then removed: syncs, one termination,
	// removal, and the worker is gone. Its first sync is held until the
	// other updates and the removal are queued: none may start beside it.
	p := pod("a")
	entered, release := r.hold("a")
	for i := 0; i < 20; i++ {
		w.Sync(p)
	}
	<-entered
	for i := 0; i < 20; i++ {
		w.Sync(p)
	}
	w.Remove(p) // queued when it returns: the worker reads it after the held call
	release()
	waitFor(t, "worker gone", func() bool { return !w.Has("a") })
	calls := r.get("a")
	last3 := calls[len(calls)-2:]
	if last3[0] != "terminating" || last3[1] != "terminated+remove" {
		t.Fatalf("calls = %v, want ... terminating, terminated+remove", calls)
	}
	for _, c := range calls[:len(calls)-2] {
		if c != "sync" {
			t.Fatalf("calls = %v: a sync after termination started", calls)
		}
	}

	// A pod that finishes on its own goes terminating → terminated and stays listed.
	r.mu.Lock()
	r.terminal["b"] = true
	r.mu.Unlock()
	w.Sync(pod("b"))
	waitFor(t, "b terminated", func() bool {
		for _, i := range w.List() {
			if i.UID == "b" && i.State == Terminated {
				return true
			}
		}
		return false
	})
	if got := r.get("b"); len(got) != 3 || got[0] != "sync" || got[1] != "terminating" || got[2] != "terminated" {
		t.Fatalf("b calls = %v", got)
	}
	// Syncing a terminated pod again never restarts it: the worker's
	// answer to the update is one more SyncTerminatedPod, and nothing else.
	w.Sync(pod("b"))
	waitFor(t, "b's worker handled the update", func() bool { return len(r.get("b")) > 3 })
	for _, c := range r.get("b")[3:] {
		if c == "sync" || c == "terminating" {
			t.Fatalf("terminated pod synced again: %v", r.get("b"))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overlap {
		t.Fatal("two calls for one pod overlapped")
	}
}

// TestKillClosesWhenStopped: Kill's channel closes only after
// SyncTerminatingPod returned (the pod's containers stopped), with the
// grace period handed through; a second Kill of a stopped pod closes at once.
func TestKillClosesWhenStopped(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := &gate{release: make(chan struct{}), entered: make(chan *int64, 1)}
	w := New(ctx, h, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)
	p := pod("k")
	w.Sync(p)
	grace := int64(7)
	done := w.Kill(p, &grace)
	got := <-h.entered
	if got == nil || *got != 7 {
		t.Fatalf("grace %v, want 7", got)
	}
	select {
	case <-done:
		t.Fatal("Kill's channel closed while the pod was still stopping")
	default:
	}
	close(h.release)
	<-done
	again := w.Kill(p, &grace)
	<-again
	cancel()
	w.Wait()
}

// gate blocks SyncTerminatingPod until release is closed.
type gate struct {
	release chan struct{}
	entered chan *int64
}

func (g *gate) SyncPod(context.Context, *corev1.Pod) (bool, time.Duration, error) {
	return false, 0, nil
}
func (g *gate) SyncTerminatingPod(_ context.Context, _ *corev1.Pod, grace *int64) error {
	g.entered <- grace
	<-g.release
	return nil
}
func (g *gate) SyncTerminatedPod(context.Context, *corev1.Pod, bool) error { return nil }

// TestWorkerDurations: every pass is timed under its operation type: the
// first sync of a pod is create, a changed pod update, a runtime event
// sync, a removal kill (its termination) and terminated (its cleanup).
func TestWorkerDurations(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRecorder()
	m := kubeletmetrics.New()
	w := New(ctx, r, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour, WithMetrics(m))
	count := func(op string) uint64 {
		got, err := testenv.GatherMetrics(m.Kubelet())
		if err != nil {
			t.Fatal(err)
		}
		return got.Count("kubelet_pod_worker_duration_seconds", map[string]string{"operation_type": op})
	}
	p := pod("d")
	w.Sync(p)
	waitFor(t, "create timed", func() bool { return count("create") == 1 })
	w.Sync(p)
	waitFor(t, "update timed", func() bool { return count("update") == 1 })
	w.Trigger(p.UID)
	waitFor(t, "sync timed", func() bool { return count("sync") == 1 })
	w.Remove(p)
	waitFor(t, "worker gone", func() bool { return !w.Has(p.UID) })
	for op, want := range map[string]uint64{"create": 1, "update": 1, "sync": 1, "kill": 1, "terminated": 1} {
		if got := count(op); got != want {
			t.Errorf("operation_type=%s: %d passes timed, want %d", op, got, want)
		}
	}
}

// TestRestartWhileRemoving: a pod removed and added back with the same UID
// while its worker stops it is stopped, cleaned up without removing its
// containers, and synced again by the same worker; a later removal removes
// it for good.
func TestRestartWhileRemoving(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRecorder()
	w := New(ctx, r, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)
	p := pod("s")
	w.Sync(p)
	waitFor(t, "first sync", func() bool { return len(r.get("s")) == 1 })

	// The termination is held until the pod is back in the config.
	entered, release := r.hold("s")
	w.Remove(p)
	<-entered
	w.Restart(p)
	release()
	want := []string{"sync", "terminating", "terminated", "sync"}
	waitFor(t, "synced again", func() bool { return len(r.get("s")) >= len(want) })
	if got := r.get("s")[:len(want)]; !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", r.get("s"), want)
	}
	if !w.Has("s") {
		t.Fatal("the restarted pod's worker exited")
	}

	w.Remove(p)
	waitFor(t, "worker gone", func() bool { return !w.Has("s") })
	if got := r.get("s"); got[len(got)-1] != "terminated+remove" {
		t.Fatalf("calls = %v, want the last removal to remove the pod", got)
	}

	// Restart of a pod without a worker is Sync.
	w.Restart(pod("t"))
	waitFor(t, "t synced", func() bool { return len(r.get("t")) == 1 })
}
