package podnet

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes podnet installs (the rtm_protocol field),
// so it lists and removes only its own and never touches routes the host,
// Docker or the bridge plugin made.
const RouteProtocol netlink.RouteProtocol = 0x6d // 'm'

// NetlinkRoutes programs Routes into the main table of a network
// namespace.
type NetlinkRoutes struct {
	// Handle is the namespace's netlink handle (netlink.NewHandleAt); nil:
	// the calling thread's namespace, the host's in the DaemonSet.
	Handle *netlink.Handle
}

func (n NetlinkRoutes) h() *netlink.Handle {
	if n.Handle != nil {
		return n.Handle
	}
	return &netlink.Handle{}
}

// List returns the IPv4 routes of the main table podnet installed.
func (n NetlinkRoutes) List() ([]Route, error) {
	rs, err := n.h().RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: RouteProtocol},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var out []Route
	for _, r := range rs {
		if r.Dst == nil || r.Gw == nil {
			continue
		}
		dst, ok1 := netip.AddrFromSlice(r.Dst.IP)
		via, ok2 := netip.AddrFromSlice(r.Gw)
		if !ok1 || !ok2 {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		out = append(out, Route{Dst: netip.PrefixFrom(dst.Unmap(), ones), Via: via.Unmap()})
	}
	return out, nil
}

// Replace adds r or moves it to its new gateway.
func (n NetlinkRoutes) Replace(r Route) error {
	if err := n.h().RouteReplace(toNetlink(r)); err != nil {
		return fmt.Errorf("route replace %s: %w", r, err)
	}
	return nil
}

// Delete removes r.
func (n NetlinkRoutes) Delete(r Route) error {
	if err := n.h().RouteDel(toNetlink(r)); err != nil {
		return fmt.Errorf("route del %s: %w", r, err)
	}
	return nil
}

func toNetlink(r Route) *netlink.Route {
	return &netlink.Route{
		Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		Gw:       r.Via.AsSlice(),
		Table:    unix.RT_TABLE_MAIN,
		Protocol: RouteProtocol,
	}
}
