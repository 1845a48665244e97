package local

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Name is the provider's name in the config.
const Name = "local"

// DefaultPool is the address pool when local_lb_pool is not set: a loopback
// range, which Linux routes to lo without any configuration.
const DefaultPool = "127.0.1.0/24"

// DefaultUDPIdleTimeout is how long a UDP session lives without a datagram.
const DefaultUDPIdleTimeout = 60 * time.Second

// Settings are the local provider's config keys; cloudsyncd's Config embeds
// them, so each is also a flag.
type Settings struct {
	// Pool is where balancer addresses come from: CIDRs and single IPs.
	Pool []string `yaml:"local_lb_pool" flag:"local-lb-pool" usage:"local provider: addresses given to LoadBalancer Services, CIDRs or IPs of this host (default 127.0.1.0/24)"`
	// UDPIdleTimeout ends a UDP client's session after this long without a datagram.
	UDPIdleTimeout time.Duration `yaml:"local_udp_idle_timeout" flag:"local-udp-idle-timeout" usage:"local provider: a UDP client's session ends after this long without a datagram (default 60s)"`
	// RouteTable is the kernel routing table the route controller's routes go in.
	RouteTable int `yaml:"local_route_table" flag:"local-route-table" usage:"local provider: kernel routing table of the pod CIDR routes (default 254, main)"`
	// RouteProtocol marks the routes as this provider's: only routes of this
	// protocol number are listed, replaced or deleted.
	RouteProtocol int `yaml:"local_route_protocol" flag:"local-route-protocol" usage:"local provider: kernel route protocol number marking the pod CIDR routes as the provider's own (default 211)"`
}

// pool is the parsed Pool: the addresses in order.
type pool struct {
	prefixes []netip.Prefix
}

// parsePool checks the pool; errors name local_lb_pool and the entry.
func parsePool(entries []string) (*pool, error) {
	if len(entries) == 0 {
		entries = []string{DefaultPool}
	}
	p := &pool{}
	for i, e := range entries {
		e = strings.TrimSpace(e)
		var pfx netip.Prefix
		var err error
		if strings.Contains(e, "/") {
			pfx, err = netip.ParsePrefix(e)
			if err == nil && pfx != pfx.Masked() {
				err = fmt.Errorf("has host bits set, want %s", pfx.Masked())
			}
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(e)
			if err == nil && a.Zone() != "" {
				err = errors.New("zoned addresses are not supported")
			}
			if err == nil {
				pfx = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil {
			return nil, fmt.Errorf("local_lb_pool[%d] %q: want a CIDR or an IP address: %v", i, e, err)
		}
		for j, q := range p.prefixes {
			if q.Overlaps(pfx) {
				return nil, fmt.Errorf("local_lb_pool[%d] %q: overlaps local_lb_pool[%d] %q", i, e, j, q)
			}
		}
		p.prefixes = append(p.prefixes, pfx)
	}
	return p, nil
}

// contains reports whether a is in the pool.
func (p *pool) contains(a netip.Addr) bool {
	for _, q := range p.prefixes {
		if q.Contains(a) {
			return true
		}
	}
	return false
}

// usable reports whether a may be handed out: in an IPv4 CIDR wider than /31
// the network and broadcast addresses are left out.
func usable(pfx netip.Prefix, a netip.Addr) bool {
	if !a.Is4() || pfx.Bits() >= 31 {
		return true
	}
	if a == pfx.Addr() {
		return false
	}
	b := a.As4()
	hostBits := 32 - pfx.Bits()
	mask := uint32(1)<<hostBits - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return v&mask != mask
}

// each calls f with every usable address of the pool in order until f returns false.
func (p *pool) each(f func(netip.Addr) bool) {
	for _, q := range p.prefixes {
		for a := q.Addr(); a.IsValid() && q.Contains(a); a = a.Next() {
			if usable(q, a) && !f(a) {
				return
			}
		}
	}
}
