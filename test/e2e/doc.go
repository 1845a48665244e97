// Package e2e proves that microlet's components can be swapped while the rest
// keeps working: its tests run the real `microlet run` supervisor and real
// service binaries against the real Docker Engine, and replace one component
// at a time (the CRI runtime, a restarted service, the cloud provider plug-in).
// It has no library code.
package e2e
