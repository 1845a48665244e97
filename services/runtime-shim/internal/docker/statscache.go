package docker

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// keyedCache fetches one value per key (a container ID) from Docker:
//
//   - at most cap(sem) fetches run at once, so a node with hundreds of
//     containers does not open hundreds of Docker calls at the same moment;
//   - callers asking for a key whose fetch is running wait for that fetch
//     instead of starting another;
//   - a value younger than fresh is served without asking Docker again;
//   - with serveStale, an older value is served at once while a fetch
//     refreshes it in the background (callers only wait for the first).
//
// A fetch runs on its own context (bounded by timeout), not its first
// caller's: others may be waiting for it, and a caller that gives up still
// leaves a value for the next one.
type keyedCache[V any] struct {
	fetch      func(ctx context.Context, key string) (V, error)
	sem        chan struct{}
	fresh      time.Duration
	serveStale bool
	timeout    time.Duration
	clock      clock.PassiveClock

	mu        sync.Mutex
	m         map[string]*cacheEntry[V]
	lastSweep time.Time
}

type cacheEntry[V any] struct {
	val     V
	at      time.Time // when val was fetched; zero while there is none
	used    time.Time // last asked for
	pending *pendingFetch[V]
}

type pendingFetch[V any] struct {
	done chan struct{}
	val  V
	err  error
}

// cacheIdle is how long a key nobody asks for stays cached; the sweep for
// such keys runs at most this often.
const cacheIdle = 2 * time.Minute

func newKeyedCache[V any](limit int, fresh, timeout time.Duration, serveStale bool, clk clock.PassiveClock, fetch func(ctx context.Context, key string) (V, error)) *keyedCache[V] {
	return &keyedCache[V]{
		fetch: fetch, sem: make(chan struct{}, limit), fresh: fresh, serveStale: serveStale,
		timeout: timeout, clock: clk, m: map[string]*cacheEntry[V]{},
	}
}

// get returns key's value, fetching it when there is none young enough.
func (c *keyedCache[V]) get(ctx context.Context, key string) (V, error) {
	c.mu.Lock()
	now := c.clock.Now()
	c.sweep(now)
	e := c.m[key]
	if e == nil {
		e = &cacheEntry[V]{}
		c.m[key] = e
	}
	e.used = now
	if !e.at.IsZero() && now.Sub(e.at) < c.fresh {
		v := e.val
		c.mu.Unlock()
		return v, nil
	}
	p := e.pending
	if p == nil {
		p = &pendingFetch[V]{done: make(chan struct{})}
		e.pending = p
		go c.run(key, e, p)
	}
	if c.serveStale && !e.at.IsZero() {
		v := e.val
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.val, p.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

func (c *keyedCache[V]) run(key string, e *cacheEntry[V], p *pendingFetch[V]) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	select {
	case c.sem <- struct{}{}:
		p.val, p.err = c.fetch(ctx, key)
		<-c.sem
	case <-ctx.Done():
		p.err = ctx.Err()
	}
	c.mu.Lock()
	if p.err == nil {
		e.val, e.at = p.val, c.clock.Now()
	}
	e.pending = nil
	c.mu.Unlock()
	close(p.done)
}

// sweep drops keys nobody asked for in cacheIdle (removed containers).
// Called with c.mu held.
func (c *keyedCache[V]) sweep(now time.Time) {
	if now.Sub(c.lastSweep) < cacheIdle {
		return
	}
	c.lastSweep = now
	for k, e := range c.m {
		if e.pending == nil && now.Sub(e.used) >= cacheIdle {
			delete(c.m, k)
		}
	}
}

// len is the number of cached keys (for tests).
func (c *keyedCache[V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
