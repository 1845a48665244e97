// Package server is the cloudsyncd service: its configuration, the
// CloudSyncService gRPC API and the work it runs.
//
// The provider named by cloud_provider is built when the config is loaded, so
// a bad provider setting stops the binary at once with a one-line error naming
// the key (exit code 2). A sync manager then refreshes the node's addresses
// every sync_frequency and the API answers from it. With no provider
// configured every call answers FailedPrecondition, telling callers
// (nodestatusd) to use the node's own addresses instead.
//
// When node_init is on and a kubeconfig is available (cloud_kubeconfig, else
// kubeconfig), the nodeinit controller performs this Node's cloud
// initialisation and keeps its shutdown taint in step with the provider.
//
// When controllers is set the process runs controller mode instead (package
// controllers, wired in controllers.go): the cluster-wide cloud from package
// cloud, k8s.io/cloud-provider's controllers under leader election, and the
// CloudSync API answering FailedPrecondition. Losing the Lease ends Run with
// an error, so the process exits 1 for its supervisor to restart.
package server
