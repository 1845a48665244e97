// Package server is the podsyncd service: its configuration, the
// PodSyncService API (ListPodWorkers), and the wiring of the sync loop to its
// peers — podconfig (desired pods), statusd (statuses), nodestatusd (the Node
// for admission and host IPs) and the CRI endpoint (runtime-shim or any other
// CRI runtime). The CRI is reached through one pair of k8s.io/cri-client
// remote services (internal/criclient, which waits for the runtime instead
// of failing), shared by the sync loop, its housekeeping and the stats.
//
// Start-up is in two steps, as the kubelet's NewMainKubelet and Run:
// Register parses and checks the whole config once (complete, every error
// at once) and registers the API; Run waits for the runtime, builds every
// subsystem once in dependency order (build), publishes the eviction
// manager and the sync loop to the handlers through atomic pointers, and
// only then starts their loops.
package server
