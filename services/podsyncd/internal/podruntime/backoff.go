package podruntime

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
)

// crashBackOff is the kubelet's CrashLoopBackOff: per container spec, a
// back-off of initial doubling to max, counted from the exited instance's
// finish time. The finish time comes from the runtime, a wall-clock
// reading without a monotonic part, so a clock stepped back after the exit
// reads before it; counted from it alone, the back-off would last as long as
// the clock went back (the kubelet's does). Here it is then counted from
// when podsyncd first saw the exit in back-off, a reading of its own clock,
// so it never lasts longer than the back-off itself.
type crashBackOff struct {
	clock   clock.Clock
	backoff *flowcontrol.Backoff

	mu   sync.Mutex
	seen map[types.UID]map[string]time.Time // by pod, by exited container ID
}

func newCrashBackOff(initial, maxDelay time.Duration, clk clock.Clock) *crashBackOff {
	return &crashBackOff{clock: clk, backoff: flowcontrol.NewFakeBackOff(initial, maxDelay, clk), seen: map[types.UID]map[string]time.Time{}}
}

// wait reports whether the exited container id (of pod uid, back-off key
// key, finished at finished) is still in back-off, the back-off and how
// long is left of it (0 < left <= backoff when in).
func (c *crashBackOff) wait(uid types.UID, key, id string, finished time.Time) (backoff, left time.Duration, in bool) {
	if !c.backoff.IsInBackOffSince(key, finished) {
		return 0, 0, false
	}
	backoff = c.backoff.Get(key)
	now := c.clock.Now()
	if left = finished.Add(backoff).Sub(now); left <= backoff {
		return backoff, left, true
	}
	// The exit is in the future: the clock was stepped back after it.
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[uid] == nil {
		c.seen[uid] = map[string]time.Time{}
	}
	at, ok := c.seen[uid][id]
	if !ok || now.Before(at) { // first seen, or the clock went back again since
		at = now
		c.seen[uid][id] = at
	}
	if left = at.Add(backoff).Sub(now); left <= 0 {
		delete(c.seen[uid], id)
		return backoff, 0, false
	}
	return backoff, left, true
}

// next counts a restart of the container after its back-off.
func (c *crashBackOff) next(uid types.UID, key, id string, finished time.Time) {
	c.backoff.Next(key, finished)
	c.mu.Lock()
	delete(c.seen[uid], id)
	c.mu.Unlock()
}

// forget drops what is remembered of pod uid's exits.
func (c *crashBackOff) forget(uid types.UID) {
	c.mu.Lock()
	delete(c.seen, uid)
	c.mu.Unlock()
}

// newPullBackOff is the kubelet's ImagePullBackOff: per pod and image, a
// back-off of initial doubling to max, counted from the failed pull's start
// by podsyncd's own clock. A clock whose readings go back (a fake one; the
// real clock's monotonic part hides a step from these comparisons) would
// otherwise hold the pull back until it caught up: an entry updated after
// now is stale and starts again from initial.
func newPullBackOff(initial, maxDelay time.Duration, clk clock.Clock) *flowcontrol.Backoff {
	b := flowcontrol.NewFakeBackOff(initial, maxDelay, clk)
	b.HasExpiredFunc = func(event, lastUpdate time.Time, maxDelay time.Duration) bool {
		return event.Before(lastUpdate) || event.Sub(lastUpdate) > 2*maxDelay
	}
	return b
}
