// Package e2e proves the kubelet API end to end: a whole microlet node
// (internal/testenv/node) on the real control plane and Docker, driven with
// kubectl v1.36 through the real kube-apiserver (logs, exec, attach, cp,
// port-forward, the summary and resource metrics through the node proxy),
// and nodeapi called directly for its authentication and authorization
// answers (401, 403) and its status codes for bad paths.
package e2e
