// Package statusupdate keeps a registered Node's status true, the kubelet's
// way: compute the status on a copy of the Node with the setters, and patch
// nodes/status (a two-way strategic merge patch from component-helpers, with
// addresses replaced whole) only when the status changed or the report
// frequency (5 min, jittered after a change) has passed. Up to 5 tries per
// sync; the first reads the Node from the informer cache, the rest live.
//
//	u := statusupdate.New(name, heartbeatClient, lister, setters, statusupdate.WithClock(clk))
//	err := u.Update(ctx)          // every node_status_update_frequency
//	u.FastUntilReady(ctx, 120*time.Second) // at start: report Ready the moment it is true
package statusupdate
