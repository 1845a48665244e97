// Package server is the nodestatusd service: its configuration (every
// interval, count and threshold with the kubelet's default), its gRPC API
// (GetNode, WatchNode, ReportNodeConditions) and the agents it runs: one for
// the real node, or --simulate N for load-testing a control plane.
//
// With a kubeconfig the Node is registered, its status patched and its Lease
// renewed; without one (standalone) the computed Node is only served here.
package server
