// Package multinode proves that microlet nodes join one cluster with a pod
// network: two whole nodes (two `microlet run`s with their own run and data
// directories, node names and Docker instance labels) registered to one
// test control plane, runtime-shim in the cni network mode writing a bridge
// network for each node's pod CIDR inside a network namespace standing for
// the node's own host, and cloudsyncd's route controller (provider local)
// routing each pod CIDR to its node's host on this machine. It has no
// library code.
package multinode
