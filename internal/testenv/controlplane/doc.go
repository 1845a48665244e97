// Package controlplane runs a real Kubernetes control plane (etcd plus a
// kube-apiserver built from k8s.io/kubernetes) on free loopback ports, so that
// everything microlet writes to the API is proven against the real thing,
// including the Node authorizer and the NodeRestriction admission plugin.
//
// One control plane is started per test package, lazily, and stopped by PID
// when the package's tests end:
//
//	func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		cp := controlplane.Get(t) // skips when etcd or kube-apiserver is missing
//		cs := kubernetes.NewForConfigOrDie(cp.NodeConfig("node-a"))
//		...
//	}
//
// Get skips the test when a binary is missing, unless
// MICROLET_REQUIRE_CONTROLPLANE=1, in which case it fails and says how to
// install them (make test-deps). The kube-apiserver is found through
// MICROLET_KUBE_APISERVER or in the cache hack/build-kube-apiserver.sh fills;
// etcd through MICROLET_ETCD or in the cache hack/build-etcd.sh fills (etcd
// v3.6.8, the version kubeadm deploys with Kubernetes v1.36.3).
//
// GetFull is Get with kube-scheduler and kube-controller-manager running
// too, for tests that need a cluster's controllers (Deployments, the
// namespace ServiceAccounts, CSR signing):
//
//	cp := controlplane.GetFull(t) // skips when a binary is missing
//
// Start is the same machinery without the testing glue
// (Options.Scheduler, Options.ControllerManager); hack/devcontrolplane
// uses it to run the control plane in the foreground for people.
package controlplane
