// Package server is the statusd service: its configuration, its gRPC API
// (microlet.statusd.v1.StatusService) and the work it runs.
//
// Standalone (no kubeconfig) it is the durable, versioned status cache with
// its Watch. Connected, it also runs the syncer (statuses to the API server)
// and the mirror-pod manager (static pods from podconfig).
//
//	func main() { service.Main(server.New()) }
package server
