// Package nodelease renews the node's heartbeat Lease (kube-node-lease/<node>)
// as the kubelet's lease controller (k8s.io/component-helpers/apimachinery/lease)
// does: holder the node, 40 s duration, renewed every quarter of it,
// created with backoff when missing (also when someone deleted it), up to
// five update tries with conflicts re-read, and an owner reference to the
// Node so the Lease goes with it. One difference: the renew time never
// moves back. A clock stepped back (NTP) would otherwise date renewals
// before the last one, which the node lifecycle controller ignores.
//
// The upstream controller owns a goroutine and a timer per node. A Renewer
// is one renewal per call instead, so the agent's scheduler runs the Leases
// of thousands of simulated nodes on a few workers; the caller waits the
// renew interval (with the kubelet's 4% jitter) after each call, or the
// backoff Renew returns.
//
//	r := nodelease.New(clk, client.CoordinationV1().Leases(corev1.NamespaceNodeLease), "node-1", 40, nodeLister, closeIdle, log)
//	for {
//		next := r.Renew(ctx)
//		if next == 0 {
//			next = wait.Jitter(nodelease.RenewInterval(40), 0.04)
//		}
//		...
//	}
package nodelease
