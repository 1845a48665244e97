// Package service is the skeleton every microlet service binary runs: load the
// config (flags over file over defaults), set up slog, listen on the service's
// socket (or take it from systemd socket activation), serve gRPC with health
// NOT_SERVING until the service reports ready, optionally serve /metrics, and
// stop cleanly on the first signal.
//
// A service's main.go is one line:
//
//	func main() { service.Main(server.New()) }
//
// where the value implements Service.
package service
