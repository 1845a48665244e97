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

// TestScheduleReleasesTasksWhenDue: a task runs at the first tick in or
// after the tick it is due in, not earlier; tasks due at once run at the
// next tick.
func TestScheduleReleasesTasksWhenDue(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1000, 0))
	s := newSchedule(clk, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { s.run(ctx); close(done) }()
	testenv.Eventually(t, "schedule waiting on its ticker", time.Minute, func() error {
		if !clk.HasWaiters() {
			return errors.New("no ticker yet")
		}
		return nil
	})

	s.after(task{agent: 1}, 0)
	s.after(task{agent: 2}, 350*time.Millisecond)
	s.after(task{agent: 3}, 10*time.Second)
	// step advances the clock, waits until the schedule has taken the tick
	// (next moves past it), then receives the tasks it released. A task
	// released early would be missing from due, so due's count is the
	// proof that nothing else went.
	step := func(d time.Duration, waiting int, want ...int32) {
		t.Helper()
		clk.Step(d)
		now := tickOf(clk.Now())
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
	step(Tick, 2, 1)
	step(Tick, 2)    // 1000.2 s: task 2 is due at 1000.35 s
	step(Tick, 1, 2) // 1000.3 s: in its tick
	step(9*time.Second, 1)
	step(time.Second, 0, 3)
	// A step far beyond several ticks releases everything due in between.
	s.after(task{agent: 4}, time.Second)
	s.after(task{agent: 5}, 2*time.Second)
	step(time.Minute, 0, 4, 5)
	cancel()
	<-done
	if _, open := <-s.ready; open {
		t.Fatal("ready not closed at the end")
	}
}

func TestWorkers(t *testing.T) {
	for n, want := range map[int]int{1: 2, 5: 2, 100: 10, 5000: 500, 100000: MaxWorkers} {
		if got := Workers(n); got != want {
			t.Errorf("Workers(%d) = %d, want %d", n, got, want)
		}
	}
}
