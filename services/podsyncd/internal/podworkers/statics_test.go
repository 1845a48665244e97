package podworkers

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/podsource"
)

// staticPod is a static pod named web in kube-system with uid.
func staticPod(uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Name: "web", Namespace: "kube-system",
		Annotations: map[string]string{podsource.SourceAnnotation: podsource.FileSource}}}
}

// refusedStart waits until uid's worker has been told to wait for its turn.
func refusedStart(t *testing.T, w *Workers, uid types.UID) {
	t.Helper()
	waitFor(t, string(uid)+" waiting for its turn", func() bool {
		return slices.ContainsFunc(w.List(), func(i Info) bool { return i.UID == uid && i.LastError == errWaitingForStaticPod.Error() })
	})
}

// TestStaticPodsOfOneNameRunOneAtATime: a static pod whose name is taken
// by another static pod that has not been cleaned up yet is never synced
// (its worker is refused, counted by the recorder as no call), starts as
// soon as the other's clean-up is done, and pods in line start in the
// order they came, skipping one removed before its turn. API pods of one
// name do not wait for each other.
func TestStaticPodsOfOneNameRunOneAtATime(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := newRecorder()
	w := New(ctx, r, slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)

	a, b, c := staticPod("a"), staticPod("b"), staticPod("c")
	w.Sync(a)
	waitFor(t, "a synced", func() bool { return len(r.get("a")) == 1 })
	w.Sync(b)
	w.Sync(c)
	refusedStart(t, w, "b")
	refusedStart(t, w, "c")

	// a is removed; its termination is held, and b and c, poked again,
	// still do not start.
	entered, release := r.hold("a")
	w.Remove(a)
	<-entered
	w.Sync(b)
	w.Trigger("c")
	refusedStart(t, w, "b")
	refusedStart(t, w, "c")
	// b leaves the line before its turn.
	w.Remove(b)
	waitFor(t, "b's worker gone", func() bool { return !w.Has("b") })
	release()

	waitFor(t, "c synced after a was cleaned up", func() bool { return len(r.get("c")) > 0 })
	if got := r.get("a"); !slices.Equal(got, []string{"sync", "terminating", "terminated+remove"}) {
		t.Errorf("a calls = %v", got)
	}
	if got := r.get("b"); slices.Contains(got, "sync") {
		t.Errorf("b, removed before its turn, was synced: %v", got)
	}
	if got := r.get("c"); got[0] != "sync" {
		t.Errorf("c calls = %v, want a sync first", got)
	}

	// c stays the started one: a new pod of the name waits for it too.
	d := staticPod("d")
	w.Sync(d)
	refusedStart(t, w, "d")
	if n := len(r.get("d")); n != 0 {
		t.Errorf("d was synced %d times while c runs", n)
	}

	// API pods sharing a name both run.
	x, y := pod("x"), pod("y")
	x.Name, y.Name = "same", "same"
	w.Sync(x)
	w.Sync(y)
	waitFor(t, "both API pods synced", func() bool { return len(r.get("x")) > 0 && len(r.get("y")) > 0 })

	r.mu.Lock()
	defer r.mu.Unlock()
	if r.overlap {
		t.Fatal("two calls for one pod overlapped")
	}
}
