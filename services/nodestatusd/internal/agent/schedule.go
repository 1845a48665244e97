package agent

import (
	"context"
	"maps"
	"slices"
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
//
// Ticks count the time elapsed since the schedule was made, not the wall
// clock: the real clock's readings carry a monotonic part, so an NTP step
// (or a date set by hand) neither holds the Lease back for as long as the
// clock went back nor fires every step at once when it went forward. A
// clock whose readings have no monotonic part (a fake one) may still go
// back; the schedule then takes it that no time passed, so steps wait their
// period from the moment of the step, not until the clock catches up.
type schedule struct {
	clock clock.WithTicker
	ready chan task

	mu   sync.Mutex
	base time.Time        // tick 0
	due  map[int64][]task // by tick number
	next int64            // the first tick not yet released
}

func newSchedule(clk clock.WithTicker, buffer int) *schedule {
	return &schedule{clock: clk, ready: make(chan task, buffer), due: map[int64][]task{}, base: clk.Now()}
}

// tickLocked is the tick t falls in. A reading before the last tick taken
// (the clock went back) moves tick 0 back by as much, so it falls in that
// tick: time stands still over the step.
func (s *schedule) tickLocked(t time.Time) int64 {
	tk := int64(t.Sub(s.base) / Tick)
	if last := s.next - 1; tk < last {
		s.base = s.base.Add(-time.Duration(last-tk) * Tick)
		tk = last
	}
	return tk
}

// after schedules t to run d from now (at the next tick when d <= 0).
func (s *schedule) after(t task, d time.Duration) {
	now := s.clock.Now()
	s.mu.Lock()
	s.tickLocked(now) // moves tick 0 if the clock went back
	at := max(int64(now.Add(max(d, 0)).Sub(s.base)/Tick), s.next)
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
		for _, t := range s.take(s.clock.Now()) {
			select {
			case s.ready <- t:
			case <-ctx.Done():
				return
			}
		}
	}
}

// take removes the tasks due up to the tick of now, oldest first.
func (s *schedule) take(now time.Time) []task {
	s.mu.Lock()
	defer s.mu.Unlock()
	tk := s.tickLocked(now)
	var out []task
	if tk-s.next > int64(len(s.due)) {
		// A long step (a fake clock moved by days): walk the due ticks,
		// not every tick in between.
		for _, at := range slices.Sorted(maps.Keys(s.due)) {
			if at <= tk {
				out = append(out, s.due[at]...)
				delete(s.due, at)
			}
		}
		s.next = tk + 1
		return out
	}
	for ; s.next <= tk; s.next++ {
		if ts, ok := s.due[s.next]; ok {
			out = append(out, ts...)
			delete(s.due, s.next)
		}
	}
	return out
}
