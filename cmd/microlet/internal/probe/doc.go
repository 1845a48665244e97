// Package probe asks a microlet component how it is: its gRPC health over its
// unix socket and, from the socket's peer credentials, the pid serving it. The
// supervisor uses it for `microlet status`, and the CLI uses it directly when
// no supervisor runs (systemd or compose deployments).
package probe
