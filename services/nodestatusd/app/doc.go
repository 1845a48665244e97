// Package app hands the nodestatusd service to the binaries that run it: its own
// (services/nodestatusd) and microlet-services, which runs every service from one
// executable (cmd/microlet-services).
package app
