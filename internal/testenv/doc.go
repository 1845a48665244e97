// Package testenv groups the helpers that give tests and the dev box real
// dependencies instead of fakes, one subpackage each: controlplane runs a
// real etcd and kube-apiserver on loopback (with kube-scheduler and
// kube-controller-manager when asked for); the others follow the same
// pattern (skip when a dependency is missing, fail when the run requires it).
//
// The package itself holds the plumbing tests that run real processes share:
// Build compiles binaries once per test process, LockedBuffer collects a
// child's output while the test reads it, ShortDir makes directories short
// enough for socket paths, Process runs a child that is stopped when the
// test ends, HostIP finds an address backends can listen on,
// FreeLoopbackAddr a port a child can listen on, Metrics reads a /metrics
// scrape (CRICalls: runtime-shim's CRI calls by method), and
// RequireOrSkip is the one way a test skips for a missing host fact (it
// fails instead under MICROLET_REQUIRE_CONTROLPLANE=1; docs/testing.md).
package testenv
