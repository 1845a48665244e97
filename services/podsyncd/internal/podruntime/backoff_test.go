package podruntime

import (
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// TestCrashBackOffAcrossClockSteps follows one crash-looping container
// through the clock's steps. Its exits are dated by the runtime (wall
// clock); the back-off left is always more than zero and at most the
// back-off. Stepped back an hour after an exit, the back-off still ends
// its 20 s after the step (counted from the exit alone it would last the
// hour); stepped back again while waiting, it starts over but stays
// bounded; stepped forward by days, the next restart is at once, and after
// the container's long run the back-off starts again from 10 s; it never
// passes its maximum.
func TestCrashBackOffAcrossClockSteps(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	c := newCrashBackOff(10*time.Second, 5*time.Minute, clk)
	const uid, key = "pod-1", "pod-1_app_hash"
	n := 0
	// crash runs the container for 1 s and exits it; the loop sees the exit
	// 1 s later. It returns the instance's ID and finish time.
	crash := func() (string, time.Time) {
		n++
		clk.Step(time.Second)
		finished := clk.Now()
		clk.Step(time.Second)
		return string(rune('a' + n)), finished
	}
	check := func(what, id string, finished time.Time, wantBackoff, wantLeft time.Duration, wantIn bool) {
		t.Helper()
		b, left, in := c.wait(uid, key, id, finished)
		if in != wantIn || (in && (b != wantBackoff || left != wantLeft)) {
			t.Fatalf("%s: in back-off %v (back-off %v, %v left), want %v (%v, %v left)", what, in, b, left, wantIn, wantBackoff, wantLeft)
		}
		if in && (left <= 0 || left > b) {
			t.Fatalf("%s: %v left of a back-off of %v", what, left, b)
		}
	}

	id, fin := crash()
	check("first exit", id, fin, 0, 0, false)
	c.next(uid, key, id, fin)
	id, fin = crash()
	check("second exit", id, fin, 10*time.Second, 9*time.Second, true)
	clk.Step(9 * time.Second)
	check("10 s after the exit", id, fin, 0, 0, false)
	c.next(uid, key, id, fin)

	id, fin = crash()
	check("third exit", id, fin, 20*time.Second, 19*time.Second, true)
	clk.Step(-time.Hour)
	check("stepped back an hour", id, fin, 20*time.Second, 20*time.Second, true)
	clk.Step(15 * time.Second)
	check("15 s after the step", id, fin, 20*time.Second, 5*time.Second, true)
	clk.Step(-24 * time.Hour)
	check("stepped back again, by a day", id, fin, 20*time.Second, 20*time.Second, true)
	clk.Step(20 * time.Second)
	check("20 s after the second step", id, fin, 0, 0, false)
	c.next(uid, key, id, fin)

	id, fin = crash()
	check("fourth exit", id, fin, 40*time.Second, 39*time.Second, true)
	clk.Step(72 * time.Hour)
	check("three days forward", id, fin, 0, 0, false)
	c.next(uid, key, id, fin)
	clk.Step(time.Hour) // the restarted container runs an hour
	id, fin = crash()
	check("exit after a long run", id, fin, 0, 0, false) // as the kubelet: a long run restarts at once
	c.next(uid, key, id, fin)
	id, fin = crash()
	check("the next exit", id, fin, 10*time.Second, 9*time.Second, true)

	for range 10 {
		clk.Step(10 * time.Minute)
		c.next(uid, key, id, fin)
		id, fin = crash()
	}
	if b, left, in := c.wait(uid, key, id, fin); !in || b != 5*time.Minute || left != 5*time.Minute-time.Second {
		t.Fatalf("a long crash loop: in %v, back-off %v, %v left; want the 5 min maximum", in, b, left)
	}
	c.forget(uid)
	if len(c.seen) != 0 {
		t.Fatalf("forget left %v", c.seen)
	}
}

// TestPullBackOffAfterAStepBack: a failed pull backs off 10 s, then 20 s.
// On a clock without a monotonic reading stepped back an hour, the pull is
// tried again at once and backs off from the start, instead of waiting for
// the clock to catch up.
func TestPullBackOffAfterAStepBack(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	b := newPullBackOff(10*time.Second, 5*time.Minute, clk)
	const key = "pull_pod-1_img"
	fail := func() { b.Next(key, clk.Now()) }
	in := func() bool { return b.IsInBackOffSinceUpdate(key, clk.Now()) }
	fail()
	clk.Step(9 * time.Second)
	if !in() {
		t.Fatal("not in back-off 9 s after a failed pull")
	}
	clk.Step(time.Second)
	if in() {
		t.Fatal("in back-off 10 s after a failed pull")
	}
	fail()
	if b.Get(key) != 20*time.Second {
		t.Fatalf("second back-off %v", b.Get(key))
	}
	clk.Step(-time.Hour)
	if in() {
		t.Fatal("in back-off after a step back of an hour")
	}
	fail()
	if b.Get(key) != 10*time.Second || !in() {
		t.Fatalf("after the step back: back-off %v, in %v; want 10 s, in", b.Get(key), in())
	}
	clk.Step(72 * time.Hour)
	if in() {
		t.Fatal("in back-off three days later")
	}
}
