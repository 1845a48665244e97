package stats

import (
	"sync"
	"time"
)

const (
	// minRateWindow is the shortest interval between two samples that
	// replaces the kept sample. Two scrapes arriving together (summary and
	// resource metrics) then do not turn jitter into a rate: the second one
	// gets the rate the first computed.
	minRateWindow = time.Second
	// rateCacheTTL drops samples of containers, pods and sandboxes not seen
	// for this long, as the kubelet's CRI stats provider does.
	rateCacheTTL = 10 * time.Minute
)

// cpuRecord is the last kept sample of one cumulative CPU counter.
type cpuRecord struct {
	at    int64  // sample time, ns since the epoch
	usage uint64 // cumulative core-nanoseconds at that time
	rate  uint64 // nanocores over the last window
	has   bool   // rate is known
	seen  time.Time
}

// rateCache turns cumulative CPU counters (what cgroups and the CRI
// report) into usage in nanocores, from the previous sample of the same
// counter. The CRI leaves UsageNanoCores to its client; the kubelet keeps
// the same kind of cache for it.
type rateCache struct {
	mu sync.Mutex
	m  map[string]*cpuRecord
}

func newRateCache() *rateCache { return &rateCache{m: make(map[string]*cpuRecord)} }

// update records a sample of key (usage core-nanoseconds at time at, in
// ns) and returns the rate since the kept sample, or nil while there is
// none: on the first sample and after the counter went backwards (a
// restarted container reusing the key). now is when the sample was taken
// by our clock, used only to expire keys.
func (c *rateCache) update(key string, at int64, usage uint64, now time.Time) *uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.m[key]
	if !ok || usage < r.usage {
		c.m[key] = &cpuRecord{at: at, usage: usage, seen: now}
		return nil
	}
	r.seen = now
	dt := at - r.at
	if dt <= 0 || (dt < int64(minRateWindow) && r.has) {
		// The same sample again, or one too close to the kept one.
		return r.result()
	}
	r.rate = uint64(float64(usage-r.usage) / float64(dt) * float64(time.Second))
	r.has = true
	if dt >= int64(minRateWindow) {
		r.at, r.usage = at, usage
	}
	return r.result()
}

func (r *cpuRecord) result() *uint64 {
	if !r.has {
		return nil
	}
	v := r.rate
	return &v
}

// expire forgets keys whose last sample is older than rateCacheTTL.
func (c *rateCache) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.m {
		if now.Sub(r.seen) > rateCacheTTL {
			delete(c.m, k)
		}
	}
}

func (c *rateCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
