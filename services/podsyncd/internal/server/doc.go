// Package server is the podsyncd service: its configuration, the
// PodSyncService API (ListPodWorkers), and the wiring of the sync loop to its
// peers — podconfig (desired pods), statusd (statuses), nodestatusd (the Node
// for admission and host IPs) and the CRI endpoint (runtime-shim or any other
// CRI runtime). The CRI is reached through one pair of k8s.io/cri-client
// remote services (internal/criclient, which waits for the runtime instead
// of failing), shared by the sync loop, its housekeeping and the stats.
package server
