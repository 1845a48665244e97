// Package faults holds end-to-end fault tests (issue #33): a whole microlet
// node (internal/testenv/node) on the real control plane and Docker Engine,
// whose runtime is restarted, hung or killed under it, checked by what the
// API server shows, the supervisor's restart counts and what is left in
// Docker and on disk.
//
// To kill runtime-shim in the middle of a CRI call without a hook in the
// shim, its --docker-host is a test proxy in front of the Docker Engine
// (dockerProxy) that holds one container create, chosen by the labels the
// shim gives it, until the test has SIGKILLed the shim; Docker then creates
// a container no runtime recorded.
package faults
