package agent

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Tick is the resolution of the Runner's schedule: a step runs at the first
// tick after the start of the tick it is due in, on average when it is due
// (periods neither stretch nor shrink) and never more than a tick off. The
// kubelet's periods are 10 s with 400 ms of jitter and its fastest loop is
// 100 ms.
const Tick = 100 * time.Millisecond

// schedule releases tasks when they are due, at the resolution of Tick: one
// ticker for all tasks instead of a timer each, and the tasks due together
// released together, so workers wake once per tick rather than once per
// task. With thousands of simulated nodes this cut the agent's CPU by more
// than half (docs/nodestatusd.md).
type schedule struct {
	clock clock.WithTicker
	ready chan task

	mu   sync.Mutex
	due  map[int64][]task // by tick number
	next int64            // the first tick not yet released
}

func newSchedule(clk clock.WithTicker, buffer int) *schedule {
	return &schedule{clock: clk, ready: make(chan task, buffer), due: map[int64][]task{}, next: tickOf(clk.Now())}
}

func tickOf(t time.Time) int64 { return t.UnixNano() / int64(Tick) }

// after schedules t to run d from now (at the next tick when d <= 0).
func (s *schedule) after(t task, d time.Duration) {
	at := tickOf(s.clock.Now().Add(d))
	s.mu.Lock()
	at = max(at, s.next)
	s.due[at] = append(s.due[at], t)
	s.mu.Unlock()
}

// run releases due tasks into ready until ctx ends, then closes ready.
func (s *schedule) run(ctx context.Context) {
	defer close(s.ready)
	tk := s.clock.NewTicker(Tick)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		}
		for _, t := range s.take(tickOf(s.clock.Now())) {
			select {
			case s.ready <- t:
			case <-ctx.Done():
				return
			}
		}
	}
}

// take removes the tasks due up to tick now, oldest first.
func (s *schedule) take(now int64) []task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []task
	for ; s.next <= now; s.next++ {
		if ts, ok := s.due[s.next]; ok {
			out = append(out, ts...)
			delete(s.due, s.next)
		}
	}
	return out
}
