package pleg

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Cache holds the runtime status last read for each pod and says whether it
// is still current, as the kubelet's pod cache does for its pod workers: a
// status stays current while the relister sees no change to the pod, so a
// periodic resync of an unchanged pod reads no runtime state. A status is
// served only once a successful relist began after it was read (until then
// a change the relister has not looked at yet could be missing from it),
// and never after the relister or the runtime's event stream reported a
// change of its pod. While relists fail (the runtime does not answer), a
// status is served for at most maxAge after the last successful one began.
// T is the status type (podruntime.PodStatus in podsyncd).
//
// The zero value is not usable; use NewCache.
type Cache[T any] struct {
	now    func() time.Time
	maxAge time.Duration

	mu sync.Mutex
	// pods holds every pod a read began for until Forget.
	pods map[types.UID]*cached[T]
	// relisted is when the last successful relist began.
	relisted time.Time
	hits     uint64
	misses   uint64
}

type cached[T any] struct {
	// gen counts the changes reported for the pod; a read that began
	// under an older gen is not stored.
	gen    uint64
	status *T
	// read is when the read that produced status began.
	read time.Time
}

// Read is a runtime read of one pod that Begin started.
type Read struct {
	uid types.UID
	gen uint64
	at  time.Time
}

// NewCache returns an empty cache; now is the clock (time.Now if nil),
// maxAge bounds how long after the last successful relist a status is
// still served (0: no bound).
func NewCache[T any](now func() time.Time, maxAge time.Duration) *Cache[T] {
	if now == nil {
		now = time.Now
	}
	return &Cache[T]{now: now, maxAge: maxAge, pods: map[types.UID]*cached[T]{}}
}

// Get returns the pod's status if it is current, or false; the caller then
// reads the runtime between Begin and Put.
func (c *Cache[T]) Get(uid types.UID) (*T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[uid]
	if p == nil || p.status == nil || !c.relisted.After(p.read) ||
		(c.maxAge > 0 && c.now().Sub(c.relisted) > c.maxAge) {
		c.misses++
		return nil, false
	}
	c.hits++
	return p.status, true
}

// Begin marks the start of a runtime read of the pod.
func (c *Cache[T]) Begin(uid types.UID) Read {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[uid]
	if p == nil {
		p = &cached[T]{}
		c.pods[uid] = p
	}
	return Read{uid: uid, gen: p.gen, at: c.now()}
}

// Put stores what the read r found, unless a change of the pod was
// reported since r began (the read may have missed it) or the pod was
// forgotten.
func (c *Cache[T]) Put(r Read, status *T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pods[r.uid]
	if p == nil || p.gen != r.gen {
		return
	}
	if p.status != nil && p.read.After(r.at) {
		return // a later read was stored already
	}
	p.status, p.read = status, r.at
}

// Changed drops the pod's status: the relister or the event stream saw its
// runtime state change.
func (c *Cache[T]) Changed(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.pods[uid]; p != nil {
		p.gen++
		p.status = nil
	}
}

// Relisted records that a relist that began at start succeeded.
func (c *Cache[T]) Relisted(start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if start.After(c.relisted) {
		c.relisted = start
	}
}

// Forget drops the pod (it is removed).
func (c *Cache[T]) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pods, uid)
}

// Retain drops every pod keep refuses (pods gone without a Forget).
func (c *Cache[T]) Retain(keep func(types.UID) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.pods {
		if !keep(uid) {
			delete(c.pods, uid)
		}
	}
}

// Len is the number of pods held.
func (c *Cache[T]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pods)
}

// Stats returns how many Gets were served from the cache and how many were not.
func (c *Cache[T]) Stats() (hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}
