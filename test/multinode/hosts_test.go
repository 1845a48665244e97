package multinode

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// nodeHost is the dev-box stand-in for a node's own machine: a network
// namespace joined to this machine by a veth pair, a /30 of the test's link
// subnet between them. This machine plays the network between hosts (a
// cloud's VPC router): it forwards between the veths and knows where each
// pod CIDR is only from the routes cloudsyncd's route controller programs.
// The node's services still run in this machine's namespace; only its pod
// network is in the host's: the CNI plugins run there, through a bin dir
// of wrappers that enter the namespace, so the bridge, its connected route,
// the masquerade and firewall rules, and the pods' veths are the host's.
type nodeHost struct {
	// netns is the namespace's name (ip netns), veth this machine's end.
	netns, veth string
	// ip is the host's address (the Node's InternalIP), gw this machine's.
	ip, gw netip.Addr
	// binDir holds one wrapper per CNI plugin of the real bin dir.
	binDir string
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newNodeHost makes host i: namespace mlh<name>, veth mlr<name> here and
// mlp<name> there, addresses .4i+1 (here) and .4i+2 (there) of links, a
// default route there via here, forwarding on, and this machine's FORWARD
// chain (Docker sets its policy to DROP) accepting the veth's traffic.
// Everything goes when the test ends.
func newNodeHost(t *testing.T, name string, links netip.Prefix, i int, plugins string) *nodeHost {
	t.Helper()
	base := links.Addr().As4()
	base[3] = byte(4 * i)
	h := &nodeHost{netns: "mlh" + name, veth: "mlr" + name}
	h.gw = netip.AddrFrom4(base).Next()
	h.ip = h.gw.Next()
	peer := "mlp" + name
	run(t, "ip", "netns", "add", h.netns)
	t.Cleanup(func() {
		// Deleting a namespace frees its veths later, from a kernel work
		// queue: delete this machine's end (and so the pair) first.
		if out, err := exec.Command("ip", "link", "del", h.veth).CombinedOutput(); err != nil {
			t.Errorf("ip link del %s: %v: %s", h.veth, err, out)
		}
		if out, err := exec.Command("ip", "netns", "del", h.netns).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", h.netns, err, out)
		}
		if _, err := netlink.LinkByName(h.veth); err == nil {
			t.Errorf("veth %s left", h.veth)
		}
		if _, err := os.Stat("/run/netns/" + h.netns); err == nil {
			t.Errorf("namespace %s left", h.netns)
		}
	})
	run(t, "ip", "link", "add", h.veth, "type", "veth", "peer", "name", peer, "netns", h.netns)
	run(t, "ip", "addr", "add", h.gw.String()+"/30", "dev", h.veth)
	run(t, "ip", "link", "set", h.veth, "up")
	run(t, "ip", "-n", h.netns, "link", "set", "lo", "up")
	run(t, "ip", "-n", h.netns, "addr", "add", h.ip.String()+"/30", "dev", peer)
	run(t, "ip", "-n", h.netns, "link", "set", peer, "up")
	run(t, "ip", "-n", h.netns, "route", "add", "default", "via", h.gw.String())
	run(t, "ip", "netns", "exec", h.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	for _, dir := range []string{"-i", "-o"} {
		run(t, "iptables", "-I", "FORWARD", dir, h.veth, "-j", "ACCEPT")
		t.Cleanup(func() {
			if out, err := exec.Command("iptables", "-D", "FORWARD", dir, h.veth, "-j", "ACCEPT").CombinedOutput(); err != nil {
				t.Errorf("iptables -D FORWARD %s %s: %v: %s", dir, h.veth, err, out)
			}
		})
	}
	h.binDir = t.TempDir()
	ents, err := os.ReadDir(plugins)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		script := fmt.Sprintf("#!/bin/sh\nexec nsenter --net=/run/netns/%s -- %s \"$@\"\n", h.netns, filepath.Join(plugins, e.Name()))
		if err := os.WriteFile(filepath.Join(h.binDir, e.Name()), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// ownRoutes lists this machine's routes of protocol proto (main table):
// destination to gateway.
func ownRoutes(t *testing.T, proto int) map[netip.Prefix]netip.Addr {
	t.Helper()
	krs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Prefix]netip.Addr{}
	for _, kr := range krs {
		if int(kr.Protocol) != proto || kr.Dst == nil {
			continue
		}
		a, _ := netip.AddrFromSlice(kr.Dst.IP)
		ones, _ := kr.Dst.Mask.Size()
		gw, _ := netip.AddrFromSlice(kr.Gw)
		out[netip.PrefixFrom(a.Unmap(), ones)] = gw.Unmap()
	}
	return out
}

// removeRoutes deletes the routes of protocol proto the route controller
// left (it does not remove routes when it stops) and checks none is left.
func removeRoutes(t *testing.T, proto int) {
	for dst := range ownRoutes(t, proto) {
		r := &netlink.Route{Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)}, Table: 254, Protocol: netlink.RouteProtocol(proto)}
		if err := netlink.RouteDel(r); err != nil {
			t.Errorf("deleting route to %s: %v", dst, err)
		}
	}
	if left := ownRoutes(t, proto); len(left) > 0 {
		t.Errorf("routes of protocol %d left: %v", proto, left)
	}
}
