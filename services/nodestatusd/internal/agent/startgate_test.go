package agent

import (
	"context"
	"testing"
	"time"
)

func TestStartGate(t *testing.T) {
	gate := make(chan struct{}, 1)
	a, b := &Agent{startGate: gate}, &Agent{startGate: gate}
	release, err := a.acquireStart(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The gate is full: b waits until its context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.acquireStart(ctx); err == nil {
		t.Fatal("second start got a slot of a full gate")
	}
	release()
	release() // a second release must not free another agent's slot
	releaseB, err := b.acquireStart(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(gate) != 1 {
		t.Fatalf("gate holds %d slots, want 1", len(gate))
	}
	releaseB()
	if len(gate) != 0 {
		t.Fatalf("gate holds %d slots after release, want 0", len(gate))
	}
	// No gate: nothing to wait for.
	if r, err := (&Agent{}).acquireStart(context.Background()); err != nil {
		t.Fatal(err)
	} else {
		r()
	}
}
