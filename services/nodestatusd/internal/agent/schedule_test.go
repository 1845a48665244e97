package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
)

// runSchedule starts a schedule on a fake clock and waits until it waits on
// its ticker; the returned stop ends it and checks that ready was closed.
func runSchedule(t *testing.T) (*schedule, *testingclock.FakeClock, func()) {
	t.Helper()
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	s := newSchedule(clk, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	testenv.Eventually(t, "schedule waiting on its ticker", time.Minute, func() error {
		if !clk.HasWaiters() {
			return errors.New("no ticker yet")
		}
		return nil
	})
	return s, clk, func() {
		cancel()
		<-done
		if _, open := <-s.ready; open {
			t.Fatal("ready not closed at the end")
		}
	}
}

// stepSchedule moves the clock by d, waits until the schedule has taken
// the tick (next moves past it), then receives the tasks it released. A
// task released early would be missing from due, so due's count is the
// proof that nothing else went.
func stepSchedule(t *testing.T, s *schedule, clk *testingclock.FakeClock, d time.Duration, waiting int, want ...int32) {
	t.Helper()
	clk.Step(d)
	s.mu.Lock()
	now := s.tickLocked(clk.Now())
	s.mu.Unlock()
	testenv.Eventually(t, fmt.Sprintf("tick %d taken", now), time.Minute, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.next <= now {
			return fmt.Errorf("next tick %d", s.next)
		}
		return nil
	})
	var g []int32
	for range want {
		select {
		case tk := <-s.ready:
			g = append(g, tk.agent)
		case <-time.After(time.Minute):
			t.Fatalf("after %v: released %v, want %v", d, g, want)
		}
	}
	s.mu.Lock()
	left := 0
	for _, ts := range s.due {
		left += len(ts)
	}
	s.mu.Unlock()
	if !slices.Equal(g, want) || left != waiting || len(s.ready) != 0 {
		t.Fatalf("after %v: released %v (%d more queued), %d waiting; want %v, %d waiting", d, g, len(s.ready), left, want, waiting)
	}
}

// TestScheduleReleasesTasksWhenDue: a task runs at the first tick in or
// after the tick it is due in, not earlier; tasks due at once run at the
// next tick.
func TestScheduleReleasesTasksWhenDue(t *testing.T) {
	s, clk, stop := runSchedule(t)
	defer stop()
	step := func(d time.Duration, waiting int, want ...int32) {
		t.Helper()
		stepSchedule(t, s, clk, d, waiting, want...)
	}
	s.after(task{agent: 1}, 0)
	s.after(task{agent: 2}, 350*time.Millisecond)
	s.after(task{agent: 3}, 10*time.Second)
	step(Tick, 2, 1)
	step(Tick, 2)    // 1000.2 s: task 2 is due at 1000.35 s
	step(Tick, 1, 2) // 1000.3 s: in its tick
	step(9*time.Second, 1)
	step(time.Second, 0, 3)
	// A step far beyond several ticks releases everything due in between.
	s.after(task{agent: 4}, time.Second)
	s.after(task{agent: 5}, 2*time.Second)
	step(time.Minute, 0, 4, 5)
}

// TestScheduleSurvivesClockSteps: the clock stepped back an hour (an NTP
// correction) does not hold the Lease and status steps back for that hour:
// time stands still over the step and a step due in 10 s runs 10 s later.
// Stepped forward by days, what was due runs at once, in order, and what is
// scheduled afterwards waits its own period from then. Before ticks were
// counted from the schedule's start (wall-clock tick numbers), the step back
// released nothing for an hour and the Node went NotReady.
//
// The fake clock's ticker does not fire again after a step back (a real
// ticker is monotonic and does), so the test takes the ticks itself.
func TestScheduleSurvivesClockSteps(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	s := newSchedule(clk, 16)
	step := func(d time.Duration, want ...int32) {
		t.Helper()
		clk.Step(d)
		var g []int32
		for _, tk := range s.take(clk.Now()) {
			g = append(g, tk.agent)
		}
		if !slices.Equal(g, want) {
			t.Fatalf("after a step of %v: released %v, want %v", d, g, want)
		}
	}
	s.after(task{agent: 1}, 10*time.Second) // a Lease renewal
	s.after(task{agent: 2}, 40*time.Second) // a status sync
	step(5 * time.Second)
	step(-time.Hour)
	step(Tick)
	step(4 * time.Second)
	step(time.Second, 1) // 10 s after it was scheduled, the hour back not counted
	s.after(task{agent: 3}, 10*time.Second)
	step(-24 * time.Hour) // a second step back, by a day
	step(9 * time.Second)
	step(time.Second, 3)
	step(25*time.Second, 2) // 40 s after it was scheduled

	// Forward by three days: due work runs at once; new work waits its period.
	s.after(task{agent: 4}, 10*time.Second)
	s.after(task{agent: 5}, 20*time.Second)
	step(72*time.Hour, 4, 5)
	s.after(task{agent: 6}, 10*time.Second)
	step(9 * time.Second)
	step(time.Second, 6)
	if len(s.due) != 0 {
		t.Fatalf("left waiting: %v", s.due)
	}
}

func TestWorkers(t *testing.T) {
	for n, want := range map[int]int{1: 2, 5: 2, 100: 10, 5000: 500, 100000: MaxWorkers} {
		if got := Workers(n); got != want {
			t.Errorf("Workers(%d) = %d, want %d", n, got, want)
		}
	}
}
