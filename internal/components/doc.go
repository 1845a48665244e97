// Package components is the one table of microlet's services: their binary,
// socket, the services they need first, and the conventions that derive an
// endpoint from the run directory. The supervisor, the CLI, the systemd units
// and the compose file all follow it.
package components
