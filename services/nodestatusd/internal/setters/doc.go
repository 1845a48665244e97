// Package setters computes a Node's status the way the kubelet's nodestatus
// package does: each Setter fills one part of the status of a Node copy
// (addresses, capacity and allocatable, node info, images, conditions,
// daemon endpoints) and the caller runs them in order, Ready last.
//
//	node := original.DeepCopy()
//	for _, set := range setters.Defaults(cfg) {
//		if err := set(ctx, node); err != nil { log... } // one failed part leaves the rest
//	}
//
// The same setters serve the real node and every simulated one; the inputs
// (host facts, CRI and cloud readings) come as functions so they can be shared.
package setters
