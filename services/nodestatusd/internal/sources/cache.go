package sources

import (
	"context"
	"sync"
	"time"
)

// ttlCache keeps the latest reading of a source for maxAge, so the many
// setters (and simulated nodes) of one sync share one call.
type ttlCache[T any] struct {
	maxAge time.Duration
	now    func() time.Time

	mu   sync.Mutex
	last T
	at   time.Time
}

// get returns the cached reading while it is younger than maxAge, else a
// new one from read.
func (c *ttlCache[T]) get(ctx context.Context, read func(context.Context) T) T {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && c.now().Sub(c.at) < c.maxAge {
		return c.last
	}
	c.last = read(ctx)
	c.at = c.now()
	return c.last
}
