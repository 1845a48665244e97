// Package conformance runs Kubernetes' own end-to-end suite (e2e.test from
// the pinned k8s.io/kubernetes) against a cluster whose only node is
// microlet, and reports the result (docs/conformance.md).
//
// The pieces: PrepareImages imports the images the sig-node [Conformance]
// specs run, offline, under their exact registry.k8s.io names; StartNode
// runs one microlet node against a control plane with a scheduler and a
// controller manager (internal/testenv/controlplane); Suite runs e2e.test
// (or the ginkgo CLI for parallel processes) and ParseJUnit reads its
// report; WriteReport turns junit files into Markdown, failures explained
// by reasons.yaml. cmd/conformance ties them together for `make
// conformance`; the package's test runs a handful of specs in `make test`.
//
//	hack/conformance.sh                     # make conformance
//	FOCUS='Pods should get a host IP' hack/conformance.sh
//	hack/conformance-report.sh _output/conformance/junit_01.xml
//
// With Suite.Node set the suite is e2e_node.test instead, the kubelet's own
// node suite (make conformance SUITE=e2enode, docs/conformance-e2enode.md):
// it starts no services, reaches the API server with a bearer token and
// reads the node's configuration from /configz at 127.0.0.1:10250; StartNode
// then gives the node that port, a static pod directory, a cluster domain
// and the root cgroup (NodeOptions), and WritePage writes that suite's page (E2ENodePage).
//
// The suite and its programs come from a module of their own,
// test/conformance/upstream (hack/build-e2e.sh e2e.test|agnhost|ginkgo),
// so neither this module nor test/controlplane carries their dependencies.
package conformance
