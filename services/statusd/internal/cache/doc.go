// Package cache is statusd's versioned pod-status cache. Every accepted change
// gets the next version of its pod, is written to the durable store before the
// call returns, and is then published to watchers and to the syncer.
//
// Changes to one pod are serialised (so versions and store writes stay in
// order); changes to different pods proceed in parallel, which lets the store
// group their fsyncs.
//
//	c := cache.New(st, cache.WithOnChange(syncer.Enqueue))
//	_ = c.Load()
//	v, err := c.SetPodStatus(pod, status)   // podstatus.ErrIllegalTransition -> InvalidArgument
package cache
