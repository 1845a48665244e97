package agent

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
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
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}

	s.after(task{agent: 1}, 0)
	s.after(task{agent: 2}, 350*time.Millisecond)
	s.after(task{agent: 3}, 10*time.Second)
	got := func() []int32 {
		var out []int32
		for {
			select {
			case tk := <-s.ready:
				out = append(out, tk.agent)
			case <-time.After(50 * time.Millisecond):
				return out
			}
		}
	}
	step := func(d time.Duration, want ...int32) {
		t.Helper()
		clk.Step(d)
		if g := got(); len(g) != len(want) || (len(g) > 0 && g[0] != want[0]) {
			t.Fatalf("after %v: released %v, want %v", d, g, want)
		}
	}
	step(Tick, 1)
	step(Tick)    // 1000.2 s: task 2 is due at 1000.35 s
	step(Tick, 2) // 1000.3 s: in its tick
	step(9 * time.Second)
	step(time.Second, 3)
	// A step far beyond several ticks releases everything due in between.
	s.after(task{agent: 4}, time.Second)
	s.after(task{agent: 5}, 2*time.Second)
	clk.Step(time.Minute)
	if g := got(); len(g) != 2 || g[0] != 4 || g[1] != 5 {
		t.Fatalf("after a long step: %v", g)
	}
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
