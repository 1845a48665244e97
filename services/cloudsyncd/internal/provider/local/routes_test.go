package local

import (
	"context"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/internal/testenv"
)

func TestRouteSettingsErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct {
		s    Settings
		want string
	}{
		{Settings{RouteTable: 255}, "local_route_table 255"},
		{Settings{RouteTable: 253}, "local_route_table 253"},
		{Settings{RouteTable: -1}, "local_route_table -1"},
		{Settings{RouteProtocol: 2}, "local_route_protocol 2: reserved"},
		{Settings{RouteProtocol: 256}, "local_route_protocol 256"},
	} {
		if _, _, err := routeSettings(c.s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error with %q", c.s, err, c.want)
		}
	}
	table, proto, err := routeSettings(Settings{})
	if err != nil || table != DefaultRouteTable || proto != DefaultRouteProtocol {
		t.Errorf("defaults: %d %d %v", table, proto, err)
	}
}

// privateNetns gives a netlink handle in a new, empty network namespace,
// gone when the test ends, so the test never touches the host's routes.
func privateNetns(t *testing.T) *netlink.Handle {
	t.Helper()
	testenv.RequireRoot(t, "a network namespace of its own")
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New()
	if serr := netns.Set(orig); serr != nil {
		t.Fatalf("back to the original namespace: %v", serr) // the thread stays locked and dies with the test
	}
	_ = orig.Close()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); _ = ns.Close() })
	return h
}

func mustCIDR(t *testing.T, s string) *net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func testNode(name, cidr string, ips ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
	for _, ip := range ips {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	return n
}

// TestLocalRoutesKernel runs Routes against the real kernel in a network
// namespace of its own: routes appear per pod CIDR via the node's
// InternalIP with the provider's protocol, creating twice changes nothing,
// a changed node IP replaces the gateway, a deleted Node's route is listed
// without a node and deleted, and routes of other protocols are never
// listed, replaced or deleted.
func TestLocalRoutesKernel(t *testing.T) {
	h := privateNetns(t)
	ctx := context.Background()
	// The nodes' link: a veth pair, both ends here (up, with carrier).
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nodes0"}, PeerName: "nodes1"}
	if err := h.LinkAdd(link); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nodes0", "nodes1"} {
		l, err := h.LinkByName(name)
		if err == nil {
			err = h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := h.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("192.0.2.1"), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	// Someone else's routes: one in the cluster CIDR, one to a CIDR a
	// Node will claim.
	foreign := []*netlink.Route{
		{Dst: mustCIDR(t, "10.244.9.0/24"), Gw: net.ParseIP("192.0.2.50"), Protocol: 4},
		{Dst: mustCIDR(t, "10.244.3.0/24"), Gw: net.ParseIP("192.0.2.51"), Protocol: 4},
	}
	for _, r := range foreign {
		if err := h.RouteAdd(r); err != nil {
			t.Fatal(err)
		}
	}

	a := testNode("a", "10.244.1.0/24", "192.0.2.10")
	b := testNode("b", "10.244.2.0/24", "192.0.2.11")
	cs := fake.NewClientset(a, b)
	r, err := NewRoutes(Settings{}, cs, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	kernel := func() map[string]string { // dst -> gw of the provider's routes
		t.Helper()
		krs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 254}, netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, kr := range krs {
			if kr.Protocol == DefaultRouteProtocol {
				out[kr.Dst.String()] = kr.Gw.String()
			}
		}
		return out
	}
	create := func(n *corev1.Node) error {
		return r.CreateRoute(ctx, "kubernetes", string(n.UID), &cloudprovider.Route{
			TargetNode: types.NodeName(n.Name), TargetNodeAddresses: n.Status.Addresses, DestinationCIDR: n.Spec.PodCIDR})
	}
	for range 2 {
		for _, n := range []*corev1.Node{a, b} {
			if err := create(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := kernel(); len(got) != 2 || got["10.244.1.0/24"] != "192.0.2.10" || got["10.244.2.0/24"] != "192.0.2.11" {
		t.Fatalf("kernel routes after creating twice: %v", got)
	}
	list := func() map[string]*cloudprovider.Route {
		t.Helper()
		rs, err := r.ListRoutes(ctx, "kubernetes")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*cloudprovider.Route{}
		for _, rt := range rs {
			out[rt.DestinationCIDR] = rt
		}
		return out
	}
	got := list()
	if len(got) != 2 || got["10.244.1.0/24"].TargetNode != "a" || got["10.244.2.0/24"].TargetNode != "b" {
		t.Fatalf("ListRoutes: %v", got)
	}
	if rt := got["10.244.1.0/24"]; !rt.EnableNodeAddresses || len(rt.TargetNodeAddresses) != 2 {
		t.Fatalf("route of a lists addresses %v, want the Node's own (nothing to update)", rt.TargetNodeAddresses)
	}

	// a's address changes: its listed route shows the old gateway only, so
	// the controller recreates it; CreateRoute replaces the gateway.
	a.Status.Addresses[0].Address = "192.0.2.12"
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if rt := list()["10.244.1.0/24"]; len(rt.TargetNodeAddresses) != 1 || rt.TargetNodeAddresses[0].Address != "192.0.2.10" {
		t.Fatalf("route of a after its IP changed lists %v, want the old gateway alone", rt.TargetNodeAddresses)
	}
	if err := create(a); err != nil {
		t.Fatal(err)
	}
	if got := kernel(); len(got) != 2 || got["10.244.1.0/24"] != "192.0.2.12" {
		t.Fatalf("kernel routes after a's IP changed: %v", got)
	}

	// b goes: its route has no node any more, and is deleted, twice.
	if err := cs.CoreV1().Nodes().Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := list()["10.244.2.0/24"]
	if rt == nil || rt.TargetNode != "" {
		t.Fatalf("route of deleted node b: %+v", rt)
	}
	for range 2 {
		if err := r.DeleteRoute(ctx, "kubernetes", rt); err != nil {
			t.Fatal(err)
		}
	}
	if got := kernel(); len(got) != 1 || got["10.244.1.0/24"] == "" {
		t.Fatalf("kernel routes after deleting b's: %v", got)
	}

	// Clear errors: a destination taken by someone else's route, a gateway
	// off every link, no InternalIP of the CIDR's family, a bad CIDR.
	for _, c := range []struct {
		n    *corev1.Node
		want string
	}{
		{testNode("c", "10.244.3.0/24", "192.0.2.13"), "already has a route to 10.244.3.0/24 that is not the local provider's"},
		{testNode("d", "10.244.4.0/24", "198.51.100.5"), "not on a link of this host"},
		{testNode("e", "10.244.5.0/24", "2001:db8::5"), `node "e" has no InternalIP of the family of pod CIDR 10.244.5.0/24`},
		{testNode("f", "10.244.6.0/33", "192.0.2.14"), `destination "10.244.6.0/33": not a CIDR`},
	} {
		if err := create(c.n); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("node %s: got %v, want an error with %q", c.n.Name, err, c.want)
		}
	}
	// Deleting the provider's route to a CIDR someone else routes leaves theirs.
	if err := r.DeleteRoute(ctx, "kubernetes", &cloudprovider.Route{DestinationCIDR: "10.244.3.0/24"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range foreign {
		krs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 254, Dst: f.Dst}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		if err != nil {
			t.Fatal(err)
		}
		if len(krs) != 1 || !krs[0].Gw.Equal(f.Gw) || krs[0].Protocol != 4 {
			t.Errorf("foreign route to %s: now %v", f.Dst, krs)
		}
	}
	if got := list(); len(got) != 1 {
		t.Errorf("ListRoutes lists %v, want the provider's one route", got)
	}
}
