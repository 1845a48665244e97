// Package server is the podsyncd service: its configuration, the
// PodSyncService API (ListPodWorkers), and the wiring of the sync loop to its
// peers — podconfig (desired pods), statusd (statuses), nodestatusd (the Node
// for admission and host IPs) and the CRI endpoint (runtime-shim or any other
// CRI runtime).
package server
