// Package multinode proves that microlet nodes join one cluster with a pod
// network: two whole nodes (two `microlet run`s with their own run and data
// directories, node names and Docker instance labels) registered to one
// test control plane, runtime-shim in the cni network mode writing a bridge
// network for each node's pod CIDR. It has no library code.
package multinode
