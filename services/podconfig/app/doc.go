// Package app hands the podconfig service to the binaries that run it: its own
// (services/podconfig) and microlet-services, which runs every service from one
// executable (cmd/microlet-services).
package app
