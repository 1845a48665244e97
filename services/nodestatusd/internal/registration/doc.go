// Package registration builds the Node a node agent registers and registers
// it the kubelet's way: create, retried from 100 ms doubling up to 7 s; when
// the Node already exists its default labels (hostname, os, arch and the
// cloud's instance-type, zone and region, GA and beta) are reconciled and
// patched, leaving everything else other writers put there.
//
//	node := registration.InitialNode(opts, cloudMetadata)
//	err := registration.Register(ctx, client, node, log) // returns once registered or ctx ends
//
// Validate* and ParseTaints check user input up front so a bad node name,
// label or taint stops startup with one line naming it.
package registration
