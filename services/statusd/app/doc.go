// Package app hands the statusd service to the binaries that run it: its own
// (services/statusd) and microlet-services, which runs every service from one
// executable (cmd/microlet-services).
package app
