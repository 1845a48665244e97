package setters

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
)

func TestPressureDegradesWhenPodsyncdIsDown(t *testing.T) {
	down := sources.PressureState{Err: errors.New("connection refused")}
	state := down
	p := NewPressure(func(context.Context) sources.PressureState { return state })
	t0 := time.Unix(1000, 0)
	ctx := context.Background()
	if v := p.Verdict(ctx, t0); v != (PressureVerdict{}) {
		t.Fatalf("podsyncd never answered: %+v, want all False", v)
	}
	state = sources.PressureState{Synchronized: true, Memory: true}
	if v := p.Verdict(ctx, t0); !v.Memory || v.Disk || v.Unknown {
		t.Fatalf("podsyncd says memory pressure: %+v", v)
	}
	state = down
	if v := p.Verdict(ctx, t0.Add(PressureStaleAfter-time.Second)); !v.Memory || v.Unknown {
		t.Fatalf("a restart of podsyncd dropped its last answer: %+v", v)
	}
	v := p.Verdict(ctx, t0.Add(PressureStaleAfter))
	if !v.Unknown || v.Memory || v.Message == "" {
		t.Fatalf("podsyncd gone for %s: %+v, want Unknown with a message", PressureStaleAfter, v)
	}
	state = sources.PressureState{Synchronized: true}
	if v := p.Verdict(ctx, t0.Add(2*PressureStaleAfter)); v != (PressureVerdict{}) {
		t.Fatalf("podsyncd back without pressure: %+v", v)
	}
}
