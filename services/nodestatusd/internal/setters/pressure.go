package setters

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
)

// PressureStaleAfter is how long the last answer of podsyncd's eviction
// manager is reported while podsyncd does not answer (a restart); after
// that the pressure conditions turn Unknown.
const PressureStaleAfter = time.Minute

// ReasonPressureUnknown is the reason of pressure conditions nobody judges.
const ReasonPressureUnknown = "EvictionManagerUnavailable"

// PressureVerdict is what the pressure conditions say.
type PressureVerdict struct {
	Memory, Disk, PID bool
	// Unknown: podsyncd answered once but not for PressureStaleAfter.
	Unknown bool
	// Message explains Unknown.
	Message string
}

// Pressure turns podsyncd's answers into the Node's pressure conditions.
// podsyncd's eviction manager is the one judge: nodestatusd measures
// nothing for them. While podsyncd never answered (it starts after
// nodestatusd) or has not measured yet, the conditions are False, as the
// kubelet's are before its eviction manager's first pass; a podsyncd that
// stops answering leaves its last answer in place for PressureStaleAfter,
// then the conditions are Unknown with a message naming the error, so no
// stale pressure (and no stale taint) is reported as fact.
type Pressure struct {
	read func(ctx context.Context) sources.PressureState

	mu     sync.Mutex
	last   sources.PressureState
	lastAt time.Time
	seen   bool
}

// NewPressure returns a Pressure reading podsyncd through read.
func NewPressure(read func(ctx context.Context) sources.PressureState) *Pressure {
	return &Pressure{read: read}
}

// Verdict reads podsyncd and says what to report at now.
func (p *Pressure) Verdict(ctx context.Context, now time.Time) PressureVerdict {
	st := p.read(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	if st.Err == nil {
		p.last, p.lastAt, p.seen = st, now, true
		return PressureVerdict{Memory: st.Memory, Disk: st.Disk, PID: st.PID}
	}
	switch {
	case !p.seen:
		return PressureVerdict{}
	case now.Sub(p.lastAt) < PressureStaleAfter:
		return PressureVerdict{Memory: p.last.Memory, Disk: p.last.Disk, PID: p.last.PID}
	default:
		return PressureVerdict{Unknown: true, Message: fmt.Sprintf(
			"podsyncd's eviction manager has not answered since %s: %v", p.lastAt.UTC().Format(time.RFC3339), st.Err)}
	}
}
