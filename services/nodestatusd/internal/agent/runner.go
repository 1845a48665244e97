package agent

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/nodestatusd/internal/statusupdate"
)

// JitterFactor is the kubelet's jitter on the status and lease periods.
const JitterFactor = 0.04

// MaxWorkers bounds Workers.
const MaxWorkers = 512

// Workers is how many workers a Runner of n agents gets: two for one node
// (its Lease never waits behind a slow status sync), else one per ten
// nodes up to MaxWorkers, so every node's heartbeat and status sync (each
// once per 10 s) are served while the API server answers within half a
// second.
func Workers(n int) int { return min(max(2, n/10), MaxWorkers) }

// step is what a task does.
type step uint8

const (
	stepStart  step = iota // register, then the other steps
	stepLease              // renew the Lease
	stepStatus             // sync the status (standalone: compute it)
	stepFast               // the startup loop
)

// task is one step of one agent. Status steps carry the agent's status
// generation: a poke starts a new chain of status syncs and the old chain's
// next step, carrying the old generation, is dropped.
type task struct {
	agent int32
	step  step
	gen   uint32
}

// Runner runs the steps of its agents on a fixed pool of workers, each
// step scheduled after the previous one ended as the kubelet's loops are:
// the Lease every renew interval, the status every update frequency, both
// with 4% jitter, and the startup loop every 100 ms until Ready is
// reported. One node or thousands cost the same goroutines and one ticker.
type Runner struct {
	agents  []*Agent
	workers int
	spread  time.Duration
	sched   *schedule
}

// startSpread is the window in which a Runner of n agents starts them, at
// random times after the first: a second per hundred agents, so thousands
// of nodes do not register in one burst and their periods do not line up.
// One node starts at once.
func startSpread(n int) time.Duration { return time.Duration(n/100) * time.Second }

// NewRunner returns the Runner of agents, which must share one Shared.
// From now on their Poke asks the Runner for a status sync.
func NewRunner(agents []*Agent) *Runner {
	r := &Runner{agents: agents, workers: Workers(len(agents)), spread: startSpread(len(agents))}
	var clk clock.WithTicker = clock.RealClock{}
	if len(agents) > 0 {
		clk = agents[0].sh.cfg.Clock
	}
	r.sched = newSchedule(clk, r.workers)
	for i, a := range agents {
		poke := func() {
			gen := a.statusGen.Add(1)
			r.sched.after(task{agent: int32(i), step: stepStatus, gen: gen}, 0) //nolint:gosec // fewer agents than int32
		}
		a.poke.Store(&poke)
	}
	return r
}

// Run works until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	for i := range r.agents {
		t := task{agent: int32(i), step: stepStart} //nolint:gosec // fewer agents than int32
		var d time.Duration
		if i > 0 && r.spread > 0 {
			d = time.Duration(rand.Int64N(int64(r.spread))) //nolint:gosec // spreading load, not security
		}
		r.sched.after(t, d)
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.sched.run(ctx) })
	for range r.workers {
		wg.Go(func() {
			for t := range r.sched.ready {
				r.do(ctx, t)
			}
		})
	}
	wg.Wait()
	return nil
}

func (r *Runner) do(ctx context.Context, t task) {
	if ctx.Err() != nil {
		return
	}
	a := r.agents[t.agent]
	next := func(s step, gen uint32, after time.Duration) {
		if ctx.Err() == nil {
			r.sched.after(task{agent: t.agent, step: s, gen: gen}, after)
		}
	}
	period := func() time.Duration { return wait.Jitter(a.sh.cfg.Timing.StatusUpdateFrequency, JitterFactor) }
	switch t.step {
	case stepStart:
		if err := a.start(ctx); err != nil {
			return // only when ctx ended: registration retries until then
		}
		a.started.Store(true)
		next(stepStatus, a.statusGen.Load(), period())
		if !a.sh.Standalone() {
			next(stepLease, 0, 0)
			next(stepFast, 0, 0)
		}
	case stepLease:
		next(stepLease, 0, a.renewLease(ctx))
	case stepStatus:
		if t.gen != a.statusGen.Load() || !a.started.Load() {
			return // a poke started a newer chain, or came before the start
		}
		if a.sh.Standalone() {
			a.syncStandalone(ctx)
		} else {
			a.sync(ctx)
		}
		next(stepStatus, t.gen, period())
	case stepFast:
		if !a.fastStep(ctx) {
			next(stepFast, 0, statusupdate.FastInterval)
		}
	}
}
