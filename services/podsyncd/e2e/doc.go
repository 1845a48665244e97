// Package e2e proves podsyncd end to end: the whole stack runs under
// `microlet run` as separate processes, against a real kube-apiserver with the
// node's own identity and the real Docker Engine through runtime-shim.
package e2e
