package nodelease

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
)

func lister(t *testing.T, nodes ...*corev1.Node) corelisters.NodeLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range nodes {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	return corelisters.NewNodeLister(idx)
}

func leaseRenewTime(t *testing.T, c *fake.Clientset) time.Time {
	t.Helper()
	l, err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Spec.RenewTime.Time
}

// TestRenewCreatesUpdatesAndOwns: the first renewal creates the Lease
// (held by the node, 40 s) without an owner while the Node is unknown;
// later renewals move the renew time and add the owner reference.
func TestRenewCreatesUpdatesAndOwns(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := fake.NewClientset()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "uid-1"}}
	r := New(clk, c.CoordinationV1().Leases(corev1.NamespaceNodeLease), "n1", 40, lister(t), nil, nil)
	if d := r.Renew(ctx); d != 0 {
		t.Fatalf("first renewal asks to wait %v", d)
	}
	l := r.latest
	if *l.Spec.HolderIdentity != "n1" || *l.Spec.LeaseDurationSeconds != 40 || len(l.OwnerReferences) != 0 {
		t.Fatalf("created lease %+v", l)
	}
	r.nodes = lister(t, node)
	clk.Step(10 * time.Second)
	if d := r.Renew(ctx); d != 0 {
		t.Fatalf("renewal asks to wait %v", d)
	}
	if got := leaseRenewTime(t, c); !got.Equal(clk.Now()) {
		t.Fatalf("renew time %v, want %v", got, clk.Now())
	}
	if refs := r.latest.OwnerReferences; len(refs) != 1 || refs[0].UID != "uid-1" || refs[0].Kind != "Node" {
		t.Fatalf("owner %+v", refs)
	}
}

// TestRenewBacksOffWhileTheLeaseCannotBeRead: each failed ensure doubles the
// wait from 200 ms up to MaxBackoff; success resets it.
func TestRenewBacksOffWhileTheLeaseCannotBeRead(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	failing := true
	c.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	r := New(testingclock.NewFakeClock(time.Now()), c.CoordinationV1().Leases(corev1.NamespaceNodeLease), "n1", 40, nil, nil, nil)
	var waits []time.Duration
	for range 8 {
		waits = append(waits, r.Renew(ctx))
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 6400 * time.Millisecond, MaxBackoff, MaxBackoff}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}
	failing = false
	if d := r.Renew(ctx); d != 0 || r.latest == nil {
		t.Fatalf("after recovery: wait %v, lease %v", d, r.latest)
	}
	failing = true
	r.latest = nil
	if d := r.Renew(ctx); d != 200*time.Millisecond {
		t.Fatalf("backoff not reset after success: %v", d)
	}
}

// TestRenewRereadsAfterConflictAndRecreatesDeletedLease: someone else wrote
// the Lease (conflict: it is read again and updated) or deleted it (the
// update fails, the Lease is created again); repeated failures call the
// hook that closes idle connections.
func TestRenewRereadsAfterConflictAndRecreatesDeletedLease(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Now())
	c := fake.NewClientset()
	failures := 0
	r := New(clk, c.CoordinationV1().Leases(corev1.NamespaceNodeLease), "n1", 40, nil, func() { failures++ }, nil)
	if d := r.Renew(ctx); d != 0 {
		t.Fatal(d)
	}
	conflicts := 1
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}, "n1", errors.New("modified"))
		}
		return false, nil, nil
	})
	clk.Step(10 * time.Second)
	if d := r.Renew(ctx); d != 0 {
		t.Fatal(d)
	}
	if got := leaseRenewTime(t, c); !got.Equal(clk.Now()) {
		t.Fatalf("after a conflict the lease was not renewed: %v, want %v", got, clk.Now())
	}

	if err := c.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	clk.Step(10 * time.Second)
	if d := r.Renew(ctx); d != 0 {
		t.Fatal(d)
	}
	if got := leaseRenewTime(t, c); !got.Equal(clk.Now()) {
		t.Fatalf("deleted lease not recreated now: %v", got)
	}
	if failures != UpdateRetries-1 {
		t.Fatalf("repeated-failure hook called %d times, want %d", failures, UpdateRetries-1)
	}
}

// TestRenewTimeMovesForwardAcrossClockSteps: the node lifecycle controller
// counts a renewal only when the renew time moves forward. Stepped back an
// hour, and again by a day, the clock reads before the Lease's renew time;
// every renewal still moves it forward, by the smallest step, until the
// clock passes it again and renewals carry the clock's time. A renewer
// started afresh (a restart) reads the Lease and keeps to the same rule.
// A forward step of days is renewed with the clock's time, and a step back
// after it keeps the renew time moving from there.
func TestRenewTimeMovesForwardAcrossClockSteps(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	c := fake.NewClientset()
	leases := c.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	r := New(clk, leases, "n1", 40, nil, nil, nil)
	last := time.Time{}
	renew := func(r *Renewer, what string, want time.Time) {
		t.Helper()
		if d := r.Renew(ctx); d != 0 {
			t.Fatalf("%s: renewal asks to wait %v", what, d)
		}
		got := leaseRenewTime(t, c)
		if !got.Equal(want) || !got.After(last) {
			t.Fatalf("%s: renew time %v, want %v (after the last, %v)", what, got, want, last)
		}
		last = got
	}
	renew(r, "first", start)
	clk.Step(10 * time.Second)
	renew(r, "10 s later", clk.Now())
	pinned := clk.Now()

	clk.Step(-time.Hour)
	for i := 1; i <= 3; i++ {
		clk.Step(10 * time.Second)
		renew(r, "after the step back", pinned.Add(time.Duration(i)*time.Microsecond))
	}
	clk.Step(-24 * time.Hour)
	renew(r, "after a second step back, by a day", pinned.Add(4*time.Microsecond))

	// A restart: the new renewer knows the Lease only from the API server.
	r = New(clk, leases, "n1", 40, nil, nil, nil)
	renew(r, "after a restart", pinned.Add(5*time.Microsecond))

	clk.SetTime(pinned.Add(10 * time.Second)) // the clock caught up
	renew(r, "caught up", clk.Now())

	clk.Step(72 * time.Hour)
	renew(r, "three days forward", clk.Now())
	ahead := clk.Now()
	clk.Step(-72 * time.Hour) // and corrected
	renew(r, "corrected back", ahead.Add(time.Microsecond))
}
