// Package node starts a whole microlet node for end-to-end tests: `microlet
// run` with every service, connected to the test control plane as
// system:node:<name>, Docker objects labelled with a per-test instance and
// removed at the end, the kubelet API on a free loopback port, and waits
// until the Node is Ready.
//
//	n := node.Start(t, node.Options{Args: map[string][]string{"podsyncd": {"--resync-period=5s"}}})
//	p := n.Create(n.Pod("web", corev1.RestartPolicyAlways, "sleep 3600"))
//	n.WaitPod(p.Namespace, p.Name, "ready", node.Ready)
//
// Launch runs the same node outside `go test` (the conformance harness):
// Config names everything Start derives from the test, ConnectedArgs are
// the flags every connected node gets, and WaitReady and WaitKubeletPort
// wait with a context. Start adds shorter podsyncd back-offs and resyncs
// for tests; Launch leaves microlet's defaults. Components lists the
// node's services as its supervisor sees them (process IDs, restarts),
// for tests that kill or watch one.
package node
