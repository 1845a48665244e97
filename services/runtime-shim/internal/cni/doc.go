// Package cni is runtime-shim's pod network through CNI plugins
// (github.com/containernetworking/cni/libcni), the shim's "cni" network
// mode.
//
// The network configuration is the lexically first valid file (.conflist,
// .conf or .json) of the configuration directory, read again whenever the
// directory's files change; plugins are found in a list of binary
// directories. Setup pins the pause container's network namespace (a bind
// mount of /proc/<pid>/ns/net under the data dir, so the namespace outlives
// the pause process) and runs ADD with the pod's CNI_ARGS and the
// portMappings, bandwidth and dns capability arguments. A record per sandbox
// (written before ADD, completed with the result after) keeps the
// configuration, arguments and pod IPs on disk, so TearDown (DEL) works the
// same after a restart of runtime-shim or Docker, with a changed or removed
// configuration, and a second time (nothing left to do); Check (CHECK)
// uses the same record.
//
// With a pod network kind ("bridge", kubenet's behaviour), UpdatePodCIDR
// writes a bridge + host-local + portmap + firewall + loopback configuration for the
// node's pod CIDRs when the directory holds none of the operator's own.
package cni
