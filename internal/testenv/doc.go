// Package testenv groups the helpers that give tests and the dev box real
// dependencies instead of fakes, one subpackage each: controlplane runs a
// real etcd and kube-apiserver on loopback; the others follow the same
// pattern (skip when a dependency is missing, fail when the run requires it).
package testenv
