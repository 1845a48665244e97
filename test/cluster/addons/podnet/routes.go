package podnet

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Route sends a pod CIDR to the node that owns it.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// String is "10.244.1.0/24 via 172.30.0.3".
func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// DesiredRoutes is the route to every other node's IPv4 pod CIDRs through
// its first IPv4 InternalIP, sorted by destination. Nodes without a
// podCIDR or InternalIP yet are skipped (they get a route once the node
// controller and the node agent fill them in); so are CIDRs outside
// cluster, which podnet does not own.
func DesiredRoutes(nodes []*corev1.Node, self string, cluster netip.Prefix) []Route {
	var out []Route
	for _, n := range nodes {
		if n.Name == self {
			continue
		}
		via, ok := internalIPv4(n)
		if !ok {
			continue
		}
		for _, c := range podCIDRs(n) {
			p, err := netip.ParsePrefix(c)
			if err != nil || !p.Addr().Is4() || !cluster.Contains(p.Addr()) {
				continue
			}
			out = append(out, Route{Dst: p.Masked(), Via: via})
		}
	}
	slices.SortFunc(out, func(a, b Route) int {
		if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
			return c
		}
		return a.Dst.Bits() - b.Dst.Bits()
	})
	return slices.CompactFunc(out, func(a, b Route) bool { return a.Dst == b.Dst })
}

// DiffRoutes is what turns current into desired: routes to add or replace
// (a destination missing or through another gateway) and routes to delete
// (a destination no node owns any more). current holds only the routes
// podnet manages (NetlinkRoutes.List filters by its protocol number).
func DiffRoutes(current, desired []Route) (add, del []Route) {
	have := make(map[netip.Prefix]netip.Addr, len(current))
	for _, r := range current {
		have[r.Dst] = r.Via
	}
	want := make(map[netip.Prefix]bool, len(desired))
	for _, r := range desired {
		want[r.Dst] = true
		if via, ok := have[r.Dst]; !ok || via != r.Via {
			add = append(add, r)
		}
	}
	for _, r := range current {
		if !want[r.Dst] {
			del = append(del, r)
		}
	}
	return add, del
}

// SelfPodCIDR is the node's IPv4 pod CIDR inside cluster.
func SelfPodCIDR(n *corev1.Node, cluster netip.Prefix) (netip.Prefix, error) {
	for _, c := range podCIDRs(n) {
		p, err := netip.ParsePrefix(c)
		if err == nil && p.Addr().Is4() && cluster.Contains(p.Addr()) {
			return p.Masked(), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("node %s: no IPv4 spec.podCIDR inside %s yet (%v)", n.Name, cluster, podCIDRs(n))
}

func podCIDRs(n *corev1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

func internalIPv4(n *corev1.Node) (netip.Addr, bool) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			return ip, true
		}
	}
	return netip.Addr{}, false
}
