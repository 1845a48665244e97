// Package server is the nodeapi service: its configuration, the wiring of
// the kubelet API's pieces (pods from podconfig and statusd, the CRI runtime,
// authentication and authorization against the API server, the serving
// certificate) and the gRPC NodeAPIService that tells nodestatusd which port
// really serves, so the Node advertises it.
//
//	func main() { service.Main(server.New()) }
package server
