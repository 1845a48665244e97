package simulate

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/microlet/microlet/services/nodestatusd/internal/agent"
	"github.com/microlet/microlet/services/nodestatusd/internal/registration"
)

// LabelPrefix marks simulated Nodes with their prefix.
const LabelPrefix = "simulate.microlet.io/prefix"

// Name is the name of simulated node i.
func Name(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }

// Agents returns n agents sharing sh. Each registers like reg, with its
// own name and hostname and the simulation label.
func Agents(sh *agent.Shared, reg registration.Options, prefix string, n int) []*agent.Agent {
	out := make([]*agent.Agent, 0, n)
	for i := range n {
		r := reg
		r.NodeName = Name(prefix, i)
		r.Hostname = r.NodeName
		r.ExtraLabels = maps.Clone(reg.ExtraLabels)
		if r.ExtraLabels == nil {
			r.ExtraLabels = map[string]string{}
		}
		r.ExtraLabels[LabelPrefix] = prefix
		out = append(out, agent.New(r.NodeName, sh, r))
	}
	return out
}

// StartConcurrency is how many simulated nodes may be registering at once
// (from the create until the shared informer sees the Node).
const StartConcurrency = 100

// RunAll runs the agents until ctx ends. Starts are spread over a second
// per hundred nodes so thousands of nodes do not register in one burst and
// their periods do not line up, and at most StartConcurrency register at
// once, so a slow API server slows registration down instead of timing it
// out.
func RunAll(ctx context.Context, agents []*agent.Agent) error {
	if len(agents) > 1 {
		gate := make(chan struct{}, StartConcurrency)
		for _, a := range agents {
			a.SetStartGate(gate)
		}
	}
	spread := time.Duration(len(agents)/100) * time.Second
	var wg sync.WaitGroup
	errs := make(chan error, len(agents))
	for i, a := range agents {
		delay := time.Duration(0)
		if i > 0 && spread > 0 {
			delay = time.Duration(rand.Int64N(int64(spread))) //nolint:gosec // spreading load, not security
		}
		wg.Go(func() {
			if delay > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
			}
			if err := a.Run(ctx); err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("node %s: %w", a.Name(), err)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
