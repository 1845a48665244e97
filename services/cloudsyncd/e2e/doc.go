// Package e2e holds end-to-end tests of cloudsyncd's controller mode: the real
// cloudsyncd binary (and examples/cloudprovider-external where a test needs a
// plug-in), built by the test, talking to a real kube-apiserver from
// internal/testenv/controlplane with the identity and ClusterRole of
// deploy/cloudsyncd-controllers-rbac.yaml, over real unix sockets, with real
// TCP through the local provider's load balancers. The package has no code
// outside its tests.
package e2e
