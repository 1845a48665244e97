// Package app hands the podsyncd service to the binaries that run it: its own
// (services/podsyncd) and microlet-services, which runs every service from one
// executable (cmd/microlet-services).
package app
