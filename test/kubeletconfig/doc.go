// Package kubeletconfig holds the tests that pin microlet's reproduction of
// the kubelet's configuration defaulting and validation
// (internal/kubeletconfig) to the kubelet's own code in k8s.io/kubernetes
// v1.36.3, and microlet's table of the kubelet's feature gates to the gates
// the kubelet registers.
package kubeletconfig
