// Package testenv groups the helpers that give tests and the dev box real
// dependencies instead of fakes: see the controlplane subpackage for a real
// etcd and kube-apiserver on loopback.
package testenv
