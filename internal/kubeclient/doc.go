// Package kubeclient builds Kubernetes client configs from a kubeconfig file,
// the in-cluster environment, or nothing at all, which means standalone mode.
package kubeclient
