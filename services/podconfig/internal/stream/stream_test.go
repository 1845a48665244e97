package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	"github.com/microlet/microlet/services/podconfig/internal/merge"
)

func pods(names ...string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, n := range names {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: "default", UID: types.UID(n)}})
	}
	return out
}

func next(t *testing.T, w *Watcher) Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestSnapshotResumeAndOverflow(t *testing.T) {
	var resyncs []string
	s := New(merge.New(), WithStartSequence(100), WithRingSize(8), WithQueueSize(4),
		WithHooks(Hooks{Resync: func(r string) { resyncs = append(resyncs, r) }}))
	s.Apply("file", pods("a"))
	s.Apply("api", nil)
	if s.Sequence() != 102 {
		t.Fatalf("sequence = %d, want 102 (ADD a, empty ADD for api)", s.Sequence())
	}

	w := s.Watch(0)
	snap := next(t, w)
	if !snap.Resync || snap.Sequence != 102 || len(snap.Updates) != 2 ||
		snap.Updates[0].GetSource() != "api" || snap.Updates[1].GetSource() != "file" ||
		snap.Updates[1].GetOp() != podconfigv1.Operation_OPERATION_SET || len(snap.Updates[1].GetPods()) != 1 {
		t.Fatalf("snapshot = %+v", snap)
	}

	// Resume right after 101: exactly 102 follows.
	r := s.Watch(101)
	if ev := next(t, r); ev.Resync || ev.Sequence != 102 {
		t.Fatalf("resume after 101 = %+v", ev)
	}
	r.Close()

	// The slow watcher w reads nothing while 6 updates go by (queue 4).
	for i := range 6 {
		s.Apply("file", pods("a", fmt.Sprint("p", i)))
	}
	ev := next(t, w)
	if !ev.Resync || ev.Sequence != s.Sequence() {
		t.Fatalf("overflowed watcher got %+v, want a snapshot at %d", ev, s.Sequence())
	}
	if len(resyncs) != 1 || resyncs[0] != "watcher fell behind" {
		t.Fatalf("resyncs = %v", resyncs)
	}
	// After the resync it follows normally.
	s.Apply("file", pods("a"))
	if ev := next(t, w); ev.Resync || ev.Sequence != s.Sequence() || ev.Updates[0].GetOp() != podconfigv1.Operation_OPERATION_REMOVE {
		t.Fatalf("after resync: %+v", ev)
	}

	// Too old (out of the ring), from the future, or more than a queue
	// behind: a snapshot.
	for _, after := range []uint64{1, 101, s.Sequence() + 5} {
		r := s.Watch(after)
		if ev := next(t, r); !ev.Resync {
			t.Fatalf("resume after %d gave %+v, want a snapshot", after, ev)
		}
		r.Close()
	}
	w.Close()
}
