// Package soak holds the chaos soak of issue #33: one connected microlet
// node (internal/testenv/node) on the real control plane and Docker Engine,
// under continuous pod churn (service pods with an init container, probes
// and configMap, secret and emptyDir volumes; batch pods that succeed, fail
// or succeed on a retry; crash-looping pods), while a fault injector
// SIGKILLs a random service every 15–60 s and, once each, restarts the
// runtime, stops the API server and fills the node's data disk (a tmpfs of
// its own). Invariants are checked all along (a healthy pod's container is
// never restarted, restart counts and terminal phases never go back) and at
// the end (every pod reaches the state its spec asks for, nothing is left
// of a deleted pod, status writes per pod and memory stay bounded).
//
// make test runs the 3-minute form; `make soak DURATION=20m` the long one.
package soak
