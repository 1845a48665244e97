package cache

import "errors"

// ErrWatchOverflow ends a watch whose reader fell too far behind; the client
// opens a new watch and gets a fresh snapshot.
var ErrWatchOverflow = errors.New("watcher fell behind; reopen the watch for a new snapshot")

// WatchBuffer is how many events a watcher may have pending.
const WatchBuffer = 4096

type watcher struct {
	ch       chan Event
	overflow bool
}

// Watch returns the current entries and a subscription to every later change.
// The events channel closes when stop is called or the reader fell behind
// (then Overflowed reports true).
func (c *Cache) Watch() (snapshot []Entry, events <-chan Event, overflowed func() bool, stop func()) {
	w := &watcher{ch: make(chan Event, WatchBuffer)}
	c.mu.Lock()
	for _, ps := range c.pods {
		if ps.present {
			snapshot = append(snapshot, ps.e.clone())
		}
	}
	c.watchers[w] = struct{}{}
	c.mu.Unlock()
	sortEntries(snapshot)
	stop = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.watchers[w]; ok {
			delete(c.watchers, w)
			close(w.ch)
		}
	}
	overflowed = func() bool {
		c.mu.RLock()
		defer c.mu.RUnlock()
		return w.overflow
	}
	return snapshot, w.ch, overflowed, stop
}

// publishLocked hands ev to every watcher without blocking. Caller holds c.mu.
func (c *Cache) publishLocked(ev Event) {
	for w := range c.watchers {
		select {
		case w.ch <- ev:
		default:
			w.overflow = true
			delete(c.watchers, w)
			close(w.ch)
		}
	}
}

// Watchers is the number of open watches: one that fell behind is no longer
// counted, its queue already released.
func (c *Cache) Watchers() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.watchers)
}
