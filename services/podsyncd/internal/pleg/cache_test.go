package pleg

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeNow is a clock the test moves.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time                 { return f.t }
func (f *fakeNow) step(d time.Duration) time.Time { f.t = f.t.Add(d); return f.t }

func mustMiss(t *testing.T, c *Cache[string], uid types.UID, why string) {
	t.Helper()
	if v, ok := c.Get(uid); ok {
		t.Fatalf("%s: served %q, want a miss", why, *v)
	}
}

func mustHit(t *testing.T, c *Cache[string], uid types.UID, want, why string) {
	t.Helper()
	v, ok := c.Get(uid)
	if !ok || *v != want {
		t.Fatalf("%s: got %v %v, want %q", why, v, ok, want)
	}
}

func ptr(s string) *string { return &s }

// TestCacheServesOnlyWhatARelistConfirmed walks a pod through the cases
// the pod workers rely on: a read is served only once a relist that
// began after it succeeded, never after a change was reported, never when
// a change was reported while the read was under way, and not for longer
// than maxAge after the last successful relist.
func TestCacheServesOnlyWhatARelistConfirmed(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1000, 0)}
	c := NewCache[string](clk.now, 10*time.Second)
	const uid = types.UID("u")

	mustMiss(t, c, uid, "never read")
	r := c.Begin(uid)
	c.Put(r, ptr("v1"))
	mustMiss(t, c, uid, "no relist since the read")
	c.Relisted(r.at) // a relist that began with the read is not after it
	mustMiss(t, c, uid, "relist began at the read")
	c.Relisted(clk.step(time.Second))
	mustHit(t, c, uid, "v1", "relisted after the read, no change")

	c.Changed(uid)
	mustMiss(t, c, uid, "change reported")

	// A change reported while a read is under way: the read may have
	// missed it, so it is not kept.
	r = c.Begin(uid)
	c.Changed(uid)
	c.Put(r, ptr("stale"))
	c.Relisted(clk.step(time.Second))
	mustMiss(t, c, uid, "read raced with a change")

	// A later read stored first is not replaced by an earlier one.
	early := c.Begin(uid)
	clk.step(time.Second)
	late := c.Begin(uid)
	c.Put(late, ptr("late"))
	c.Put(early, ptr("early"))
	c.Relisted(clk.step(time.Second))
	mustHit(t, c, uid, "late", "later read kept")

	// Relists stop succeeding: served until maxAge after the last success.
	clk.step(9 * time.Second)
	mustHit(t, c, uid, "late", "within maxAge of the last relist")
	clk.step(2 * time.Second)
	mustMiss(t, c, uid, "past maxAge without a relist")
	c.Relisted(clk.step(time.Second))
	mustHit(t, c, uid, "late", "relists work again")

	// A relist that began before the newest one is ignored.
	c.Relisted(clk.t.Add(-time.Hour))
	mustHit(t, c, uid, "late", "an older relist's report")

	c.Forget(uid)
	mustMiss(t, c, uid, "forgotten")
	c.Put(late, ptr("after forget"))
	mustMiss(t, c, uid, "put after forget")
	if n := c.Len(); n != 0 {
		t.Fatalf("Len = %d after Forget", n)
	}
	// Changes of pods the cache never held leave nothing behind.
	c.Changed("other")
	if n := c.Len(); n != 0 {
		t.Fatalf("Len = %d after a change of an unknown pod", n)
	}
	c.Put(c.Begin("kept"), ptr("k"))
	c.Put(c.Begin("gone"), ptr("g"))
	c.Retain(func(uid types.UID) bool { return uid == "kept" })
	if n := c.Len(); n != 1 {
		t.Fatalf("Len = %d after Retain of one of two pods", n)
	}
	hits, misses := c.Stats()
	if hits != 5 || misses != 8 {
		t.Fatalf("hits, misses = %d, %d; want 5, 8", hits, misses)
	}
}

// TestRelistKeepsTheCacheCurrent: through a Relister, a pod whose containers
// did not change between two relists is served from the cache; a container
// that changed state drops the pod's status before its sync is asked for
// (onChange), and a failed relist confirms nothing.
func TestRelistKeepsTheCacheCurrent(t *testing.T) {
	f := &fakeRuntime{
		sbs: []*runtimeapi.PodSandbox{{Id: "s", State: runtimeapi.PodSandboxState_SANDBOX_READY, Labels: uidLabels("a")}},
		cs:  []*runtimeapi.Container{{Id: "c", State: runtimeapi.ContainerState_CONTAINER_RUNNING, Labels: uidLabels("a")}},
	}
	c := NewCache[string](nil, 0)
	var servedAtChange []bool
	r := New(f, 0, slog.New(slog.NewTextHandler(io.Discard, nil)), func(uid types.UID) {
		_, ok := c.Get(uid)
		servedAtChange = append(servedAtChange, ok)
	}, WithObserver(c))
	ctx := context.Background()
	if err := r.Relist(ctx); err != nil { // first sight of "a": a change
		t.Fatal(err)
	}
	c.Put(c.Begin("a"), ptr("running"))
	time.Sleep(time.Millisecond) // the next relist begins after the read
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	mustHit(t, c, "a", "running", "unchanged pod after a relist")

	f.mu.Lock()
	f.cs[0] = &runtimeapi.Container{Id: "c", State: runtimeapi.ContainerState_CONTAINER_EXITED, Labels: uidLabels("a")}
	f.mu.Unlock()
	if err := r.Relist(ctx); err != nil {
		t.Fatal(err)
	}
	mustMiss(t, c, "a", "container exited")
	if len(servedAtChange) != 2 || servedAtChange[1] {
		t.Fatalf("onChange calls saw the cache serve %v; want two calls, the second after the status was dropped", servedAtChange)
	}

	c.Put(c.Begin("a"), ptr("exited"))
	f.mu.Lock()
	f.fail = true
	f.mu.Unlock()
	if err := r.Relist(ctx); err == nil {
		t.Fatal("relist of a failing runtime succeeded")
	}
	mustMiss(t, c, "a", "no successful relist since the read")
}
