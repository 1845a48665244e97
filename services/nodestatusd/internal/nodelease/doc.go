// Package nodelease runs the node's heartbeat Lease (kube-node-lease/<node>)
// with the component-helpers lease controller the kubelet uses: holder the
// node, 40 s duration, renewed every quarter of it with jitter, created with
// backoff when missing (also when someone deleted it), conflicts re-read,
// and an owner reference to the Node so the Lease goes with it.
//
//	c := nodelease.New(clk, heartbeatClient, "node-1", 40, 10*time.Second, nodeLister, closeIdle)
//	go c.Run(ctx)
package nodelease
