package server

import (
	"sync"
	"time"

	"github.com/microlet/microlet/services/nodestatusd/internal/host"
)

// statsCache shares one host measurement between the setters of a sync and
// between simulated nodes: /proc and statfs once a second, not per node.
type statsCache struct {
	h           *host.Host
	fs, imageFs string
	ttl         time.Duration
	mu          sync.Mutex
	at          time.Time
	last        host.Stats
	lastErr     error
}

func newStatsCache(h *host.Host, fs, imageFs string, ttl time.Duration) *statsCache {
	return &statsCache{h: h, fs: fs, imageFs: imageFs, ttl: ttl}
}

func (c *statsCache) get() (host.Stats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		return c.last, c.lastErr
	}
	c.last, c.lastErr = c.h.Stats(c.fs, c.imageFs)
	c.at = time.Now()
	return c.last, c.lastErr
}
