// Package podnet is microlet's pod network agent for the test cluster, a
// small kindnet-like program run as a host-network privileged DaemonSet on
// every node. From a Node informer it keeps three things of its own node
// true:
//
//   - the CNI conflist in the CNI configuration directory (bridge with
//     host-local IPAM over the node's spec.podCIDR, portmap, loopback),
//     written atomically (Conflist, WriteConflist);
//   - a route to every other node's podCIDR via that node's InternalIP, and
//     no stale ones (DesiredRoutes, DiffRoutes, NetlinkRoutes);
//   - masquerade for pod traffic leaving the cluster's pod network
//     (Masquerade, iptables).
//
// Usage (cmd/podnet does this):
//
//	a, err := podnet.New(podnet.Config{NodeName: n, ClusterCIDR: c, CNIConfDir: "/etc/cni/net.d"}, client)
//	err = a.Run(ctx)
//
// Why a per-node agent rather than cloudsyncd's route controller: routes
// to the pod CIDRs must exist in every node's routing table, and a route
// controller programs one host. docs/cluster-addons.md has the design.
package podnet
