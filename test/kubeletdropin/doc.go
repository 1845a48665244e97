// Package kubeletdropin tests microlet as a drop-in for the kubelet on the
// real stack (kube-apiserver, Docker): a node configured only by the
// KubeletConfiguration the conformance harness gives the upstream kubelet,
// and the kubelet's flags, registers, runs a pod and serves its API with
// the effective configuration on /configz.
package kubeletdropin
