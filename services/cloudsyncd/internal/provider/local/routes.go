package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"
)

// DefaultRouteTable is the kernel routing table of the routes when
// local_route_table is not set: main.
const DefaultRouteTable = 254

// DefaultRouteProtocol is the kernel route protocol number marking the
// routes as the local provider's when local_route_protocol is not set. No
// well-known routing daemon uses it (see /etc/iproute2/rt_protos).
const DefaultRouteProtocol = 211

// Routes is cloudprovider.Routes on this host's kernel routing table: each
// Node's pod CIDR is routed via the Node's InternalIP of the CIDR's family.
// Its routes carry their own protocol number; routes of any other protocol
// are never listed, replaced or deleted.
type Routes struct {
	h     *netlink.Handle
	table int
	proto netlink.RouteProtocol
	kube  kubernetes.Interface
	log   *slog.Logger
}

var _ cloudprovider.Routes = (*Routes)(nil)

// NewRoutes checks local_route_table and local_route_protocol and returns
// Routes programming the routes through h (nil: a netlink handle in the
// caller's network namespace). cs tells which Node a route's CIDR belongs to.
func NewRoutes(s Settings, cs kubernetes.Interface, h *netlink.Handle, log *slog.Logger) (*Routes, error) {
	table, proto, err := routeSettings(s)
	if err != nil {
		return nil, err
	}
	if cs == nil {
		return nil, errors.New("cloud_provider local: routes need a kube client to read the Nodes")
	}
	if log == nil {
		log = slog.Default()
	}
	if h == nil {
		if h, err = netlink.NewHandle(); err != nil {
			return nil, fmt.Errorf("cloud_provider local: netlink: %w", err)
		}
	}
	return &Routes{h: h, table: table, proto: netlink.RouteProtocol(proto), kube: cs, log: log}, nil
}

// routeSettings applies the defaults and refuses tables and protocols the
// kernel or other software own.
func routeSettings(s Settings) (table, proto int, err error) {
	table, proto = s.RouteTable, s.RouteProtocol
	if table == 0 {
		table = DefaultRouteTable
	}
	if proto == 0 {
		proto = DefaultRouteProtocol
	}
	switch {
	case table < 0 || int64(table) > 0xFFFFFFFF:
		return 0, 0, fmt.Errorf("local_route_table %d: want 1 to 4294967295", table)
	case table == 253 || table == 255:
		return 0, 0, fmt.Errorf("local_route_table %d: the kernel's own table (default or local), pick main (254) or a table of your own", table)
	case proto < 0 || proto > 255:
		return 0, 0, fmt.Errorf("local_route_protocol %d: want 5 to 255", proto)
	case proto <= 4:
		// 0 unspec, 1 redirect, 2 kernel, 3 boot, 4 static: everyone's.
		return 0, 0, fmt.Errorf("local_route_protocol %d: reserved (unspec, redirect, kernel, boot, static), want 5 to 255", proto)
	}
	return table, proto, nil
}

// Close releases the netlink sockets.
func (r *Routes) Close() { r.h.Close() }

// ListRoutes implements cloudprovider.Routes: the routes of the provider's
// protocol in its table. A route's node is the Node whose spec.podCIDRs has
// the destination; a route no Node claims has none, so the route controller
// deletes it when it is inside the cluster CIDR. The node addresses are the
// Node's own while the gateway is still its InternalIP, else just the
// gateway, so a Node whose address changed gets its route replaced.
func (r *Routes) ListRoutes(ctx context.Context, _ string) ([]*cloudprovider.Route, error) {
	krs, err := r.own()
	if err != nil {
		return nil, err
	}
	nodes, err := r.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("local routes: listing Nodes: %w", err)
	}
	owner := map[netip.Prefix]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		for _, c := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				owner[p.Masked()] = n
			}
		}
	}
	out := make([]*cloudprovider.Route, 0, len(krs))
	for _, kr := range krs {
		dst := routeDst(kr)
		gw, _ := netip.AddrFromSlice(kr.Gw)
		gw = gw.Unmap()
		rt := &cloudprovider.Route{
			Name:                fmt.Sprintf("%s via %s", dst, gw),
			DestinationCIDR:     dst.String(),
			EnableNodeAddresses: true,
			TargetNodeAddresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: gw.String()}},
		}
		if n := owner[dst]; n != nil {
			rt.TargetNode = types.NodeName(n.Name)
			if want, ok := nodeGateway(n.Status.Addresses, dst); ok && want == gw {
				rt.TargetNodeAddresses = n.Status.Addresses
			}
		}
		out = append(out, rt)
	}
	return out, nil
}

// CreateRoute implements cloudprovider.Routes: DestinationCIDR via the
// target Node's InternalIP of its family. A route of the provider's already
// there is kept when its gateway is right and replaced when not; a route
// to the same destination that is not the provider's is an error.
func (r *Routes) CreateRoute(_ context.Context, _ string, _ string, route *cloudprovider.Route) error {
	if route == nil {
		return errors.New("local routes: route is nil")
	}
	dst, err := parseDst(route.DestinationCIDR)
	if err != nil {
		return err
	}
	gw, ok := nodeGateway(route.TargetNodeAddresses, dst)
	if !ok {
		return fmt.Errorf("local routes: node %q has no InternalIP of the family of pod CIDR %s (addresses %v)", route.TargetNode, dst, route.TargetNodeAddresses)
	}
	want := r.kernelRoute(dst)
	want.Gw = net.IP(gw.AsSlice())
	there, err := r.list(dst)
	if err != nil {
		return err
	}
	replace := false
	for _, kr := range there {
		if kr.Priority != 0 || kr.Tos != 0 {
			continue // another key: the kernel keeps both
		}
		if kr.Protocol != r.proto {
			return fmt.Errorf("local routes: table %d already has a route to %s that is not the local provider's (protocol %s, gateway %v, device index %d): not replacing it", r.table, dst, kr.Protocol, kr.Gw, kr.LinkIndex)
		}
		if kr.Gw.Equal(want.Gw) && kr.Type == want.Type {
			return nil
		}
		replace = true
	}
	if replace {
		err = r.h.RouteReplace(want)
	} else {
		err = r.h.RouteAdd(want)
	}
	if err != nil {
		hint := ""
		if errors.Is(err, syscall.ENETUNREACH) {
			hint = " (the gateway is not on a link of this host)"
		}
		return fmt.Errorf("local routes: route %s via %s (node %s) in table %d: %w%s", dst, gw, route.TargetNode, r.table, err, hint)
	}
	r.log.Info("local route created", "cidr", dst, "via", gw, "node", route.TargetNode, "table", r.table, "replaced", replace)
	return nil
}

// DeleteRoute implements cloudprovider.Routes: the provider's route to
// DestinationCIDR goes; none there is success.
func (r *Routes) DeleteRoute(_ context.Context, _ string, route *cloudprovider.Route) error {
	if route == nil {
		return errors.New("local routes: route is nil")
	}
	dst, err := parseDst(route.DestinationCIDR)
	if err != nil {
		return err
	}
	// The kernel deletes only a route of the given protocol and table.
	if err := r.h.RouteDel(r.kernelRoute(dst)); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("local routes: deleting route %s (node %s) from table %d: %w", dst, route.TargetNode, r.table, err)
	}
	r.log.Info("local route deleted", "cidr", dst, "node", route.TargetNode, "table", r.table)
	return nil
}

// kernelRoute is the provider's route to dst, without its gateway.
func (r *Routes) kernelRoute(dst netip.Prefix) *netlink.Route {
	fam := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	return &netlink.Route{
		Dst:      &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Family:   fam,
		Table:    r.table,
		Protocol: r.proto,
		Type:     syscall.RTN_UNICAST,
	}
}

// own lists the provider's routes.
func (r *Routes) own() ([]netlink.Route, error) {
	all, err := r.dump(&netlink.Route{Table: r.table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, kr := range all {
		if kr.Protocol == r.proto {
			out = append(out, kr)
		}
	}
	return out, nil
}

// list is every route to dst in the table, whatever its protocol.
func (r *Routes) list(dst netip.Prefix) ([]netlink.Route, error) {
	f := r.kernelRoute(dst)
	return r.dump(&netlink.Route{Table: r.table, Dst: f.Dst}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
}

// dump lists routes of both families, again when the kernel says the dump
// was interrupted by a change.
func (r *Routes) dump(filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	var err error
	for range 3 {
		var krs []netlink.Route
		krs, err = r.h.RouteListFiltered(netlink.FAMILY_ALL, filter, mask)
		if err == nil {
			return krs, nil
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	return nil, fmt.Errorf("local routes: listing table %d: %w", r.table, err)
}

// routeDst is a kernel route's destination (a default route has none).
func routeDst(kr netlink.Route) netip.Prefix {
	if kr.Dst == nil {
		if kr.Family == netlink.FAMILY_V6 {
			return netip.MustParsePrefix("::/0")
		}
		return netip.MustParsePrefix("0.0.0.0/0")
	}
	a, _ := netip.AddrFromSlice(kr.Dst.IP)
	ones, _ := kr.Dst.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked()
}

// parseDst reads a route's DestinationCIDR.
func parseDst(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("local routes: destination %q: not a CIDR: %v", s, err)
	}
	return p.Masked(), nil
}

// nodeGateway is the first InternalIP of addrs in dst's family.
func nodeGateway(addrs []corev1.NodeAddress, dst netip.Prefix) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err == nil && ip.Unmap().Is4() == dst.Addr().Is4() {
			return ip.Unmap(), true
		}
	}
	return netip.Addr{}, false
}
