package server

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/services/nodestatusd/internal/registration"
	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
	"github.com/microlet/microlet/services/nodestatusd/internal/statusupdate"
)

// TestStatusPatchedOnlyOnChange drives the updater with an injected clock
// and the node's own identity: the first sync patches, unchanged syncs do
// not (the Node's resourceVersion stays), a change patches, and the report
// frequency passing patches again. Changed addresses replace the old ones.
// A clock stepped back an hour reports at once and then every report
// frequency again, rather than not for an hour and five minutes.
func TestStatusPatchedOnlyOnChange(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	const name = "nsd-patch-1"
	client := clientFor(t, cp.NodeConfig(name))
	admin := adminClient(t, cp)
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	if err := registration.TryRegister(ctx, client, registration.InitialNode(registration.Options{NodeName: name}, nil, log), log); err != nil {
		t.Fatal(err)
	}

	clk := testingclock.NewFakeClock(time.Now())
	var mu sync.Mutex
	custom := corev1.ConditionFalse
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeExternalIP, Address: "198.51.100.1"}, {Type: corev1.NodeHostName, Address: name}}
	set := []setters.Setter{
		func(_ context.Context, n *corev1.Node) error {
			mu.Lock()
			defer mu.Unlock()
			n.Status.Addresses = append([]corev1.NodeAddress(nil), addrs...)
			setters.SetCondition(n, corev1.NodeCondition{Type: "TestCondition", Status: custom, Reason: "Test"}, clk.Now())
			return nil
		},
	}
	u := statusupdate.New(name, client, nil, set, statusupdate.WithClock(clk), statusupdate.WithoutJitter(), statusupdate.WithLogger(log))

	rv := func() string {
		n, err := getNode(ctx, admin, name)
		if err != nil {
			t.Fatal(err)
		}
		return n.ResourceVersion
	}
	sync := func(wantPatches int) {
		t.Helper()
		if err := u.Update(ctx); err != nil {
			t.Fatal(err)
		}
		if got := u.Patches(); got != wantPatches {
			t.Fatalf("patches = %d, want %d", got, wantPatches)
		}
	}
	sync(1) // first report
	rv1 := rv()
	for range 3 {
		clk.Step(time.Minute)
		sync(1) // heartbeat moved, nothing else: no write
	}
	if got := rv(); got != rv1 {
		t.Fatalf("Node written without a change: rv %s -> %s", rv1, got)
	}

	mu.Lock()
	custom = corev1.ConditionTrue
	mu.Unlock()
	sync(2) // changed

	clk.Step(4*time.Minute + 59*time.Second)
	sync(2)
	clk.Step(2 * time.Second)
	sync(3) // report frequency passed

	mu.Lock()
	addrs = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.2"}, {Type: corev1.NodeHostName, Address: name}}
	mu.Unlock()
	sync(4)
	n, err := getNode(ctx, admin, name)
	if err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(n.Status.Addresses, addrs) {
		t.Fatalf("addresses merged instead of replaced: %+v", n.Status.Addresses)
	}

	clk.Step(-time.Hour)
	sync(5) // stepped back: reported at once
	clk.Step(4*time.Minute + 59*time.Second)
	sync(5)
	clk.Step(2 * time.Second)
	sync(6) // and periodically from there
}
