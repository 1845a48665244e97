// Package app hands the cloudsyncd service to the binaries that run it: its own
// (services/cloudsyncd) and microlet-services, which runs every service from one
// executable (cmd/microlet-services).
package app
