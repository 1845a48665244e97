// Package app hands the nodeapi service to the binaries that run it: its own
// (services/nodeapi) and microlet-services, which runs every service from one
// executable (cmd/microlet-services).
package app
