// Package faults holds end-to-end fault tests (issue #33): a whole microlet
// node (internal/testenv/node) on the real control plane and Docker Engine,
// whose runtime is restarted or hung under it, checked by what the API
// server shows and by the supervisor's restart counts.
package faults
