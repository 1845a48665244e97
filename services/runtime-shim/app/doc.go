// Package app hands the runtime-shim service to the binaries that run it: its own
// (services/runtime-shim) and microlet-services, which runs every service from one
// executable (cmd/microlet-services).
package app
