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

// NetlinkRoutes programs Routes into the main table of the current
// network namespace.
type NetlinkRoutes struct{}

// List returns the IPv4 routes of the main table podnet installed.
func (NetlinkRoutes) List() ([]Route, error) {
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
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
func (NetlinkRoutes) Replace(r Route) error {
	if err := netlink.RouteReplace(toNetlink(r)); err != nil {
		return fmt.Errorf("route replace %s: %w", r, err)
	}
	return nil
}

// Delete removes r.
func (NetlinkRoutes) Delete(r Route) error {
	if err := netlink.RouteDel(toNetlink(r)); err != nil {
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
