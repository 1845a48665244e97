// Package server is the nodestatusd service: its configuration (every
// interval, count and threshold with the kubelet's default), its gRPC API
// (GetNode, WatchNode, ReportNodeConditions) and the agents it runs: one for
// the node it runs on. Nodes says which nodes it keeps; nodestatussim
// (package simulate) reuses the server with its own.
//
// With a kubeconfig the Node is registered, its status patched and its Lease
// renewed; without one (standalone) the computed Node is only served here.
package server
