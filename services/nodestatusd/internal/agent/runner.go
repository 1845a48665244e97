package agent

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"

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

// task is one step of one agent; the queue holds each at most once.
type task struct {
	agent int32
	step  step
}

// Runner runs the steps of its agents on a fixed pool of workers, each
// step scheduled after the previous one ended as the kubelet's loops are:
// the Lease every renew interval, the status every update frequency, both
// with 4% jitter, and the startup loop every 100 ms until Ready is
// reported. One node or thousands cost the same goroutines.
type Runner struct {
	agents  []*Agent
	workers int
	spread  time.Duration
	queue   workqueue.TypedDelayingInterface[task]
}

// RunnerOption configures a Runner.
type RunnerOption func(*Runner)

// WithWorkers overrides Workers(len(agents)).
func WithWorkers(n int) RunnerOption { return func(r *Runner) { r.workers = max(n, 1) } }

// WithStartSpread starts the agents at random times within d, so thousands
// of simulated nodes do not register in one burst and their periods do not
// line up. The first agent starts at once.
func WithStartSpread(d time.Duration) RunnerOption { return func(r *Runner) { r.spread = d } }

// NewRunner returns the Runner of agents, which must share one Shared.
// From now on their Poke asks the Runner for a status sync.
func NewRunner(agents []*Agent, opts ...RunnerOption) *Runner {
	r := &Runner{agents: agents, workers: Workers(len(agents))}
	for _, o := range opts {
		o(r)
	}
	var cfg workqueue.TypedDelayingQueueConfig[task]
	if len(agents) > 0 {
		cfg.Clock = agents[0].sh.cfg.Clock
	}
	r.queue = workqueue.NewTypedDelayingQueueWithConfig(cfg)
	for i, a := range agents {
		poke := func() { r.queue.Add(task{agent: int32(i), step: stepStatus}) } //nolint:gosec // fewer agents than int32
		a.poke.Store(&poke)
	}
	return r
}

// Run works until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	for i := range r.agents {
		t := task{agent: int32(i), step: stepStart} //nolint:gosec // fewer agents than int32
		if i > 0 && r.spread > 0 {
			r.queue.AddAfter(t, time.Duration(rand.Int64N(int64(r.spread)))) //nolint:gosec // spreading load, not security
		} else {
			r.queue.Add(t)
		}
	}
	var wg sync.WaitGroup
	for range r.workers {
		wg.Go(func() { r.work(ctx) })
	}
	<-ctx.Done()
	r.queue.ShutDown()
	wg.Wait()
	return nil
}

func (r *Runner) work(ctx context.Context) {
	for {
		t, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		r.do(ctx, t)
		r.queue.Done(t)
	}
}

func (r *Runner) do(ctx context.Context, t task) {
	if ctx.Err() != nil {
		return
	}
	a := r.agents[t.agent]
	next := func(s step, after time.Duration) {
		if ctx.Err() == nil {
			r.queue.AddAfter(task{agent: t.agent, step: s}, after)
		}
	}
	period := func() time.Duration { return wait.Jitter(a.sh.cfg.Timing.StatusUpdateFrequency, JitterFactor) }
	switch t.step {
	case stepStart:
		if err := a.start(ctx); err != nil {
			return // only when ctx ended: registration retries until then
		}
		next(stepStatus, period())
		if !a.sh.Standalone() {
			next(stepLease, 0)
			next(stepFast, 0)
		}
	case stepLease:
		next(stepLease, a.renewLease(ctx))
	case stepStatus:
		if a.sh.Standalone() {
			a.syncStandalone(ctx)
		} else {
			a.sync(ctx)
		}
		next(stepStatus, period())
	case stepFast:
		if !a.fastStep(ctx) {
			next(stepFast, statusupdate.FastInterval)
		}
	}
}
