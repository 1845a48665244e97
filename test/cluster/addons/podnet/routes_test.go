package podnet

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name, podCIDR string, addrs ...corev1.NodeAddress) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if podCIDR != "" {
		n.Spec.PodCIDR = podCIDR
		n.Spec.PodCIDRs = []string{podCIDR}
	}
	n.Status.Addresses = addrs
	return n
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

var cluster = netip.MustParsePrefix("10.244.0.0/16")

func routes(s ...string) []Route {
	var out []Route
	for i := 0; i < len(s); i += 2 {
		out = append(out, Route{Dst: netip.MustParsePrefix(s[i]), Via: netip.MustParseAddr(s[i+1])})
	}
	return out
}

func TestDesiredRoutes(t *testing.T) {
	nodes := []*corev1.Node{
		node("self", "10.244.0.0/24", internal("172.30.0.2")),
		node("b", "10.244.2.0/24", internal("172.30.0.4")),
		node("a", "10.244.1.0/24", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "a"}, internal("fd00::3"), internal("172.30.0.3")),
		node("no-cidr-yet", "", internal("172.30.0.5")),
		node("no-ip-yet", "10.244.6.0/24"),
		node("outside", "192.168.7.0/24", internal("172.30.0.7")),
	}
	got := DesiredRoutes(nodes, "self", cluster)
	want := routes("10.244.1.0/24", "172.30.0.3", "10.244.2.0/24", "172.30.0.4")
	if !slices.Equal(got, want) {
		t.Errorf("DesiredRoutes = %v, want %v", got, want)
	}
}

func TestDiffRoutes(t *testing.T) {
	for _, tc := range []struct {
		name             string
		current, desired []Route
		wantAdd, wantDel []Route
	}{
		{name: "empty"},
		{name: "first nodes", desired: routes("10.244.1.0/24", "172.30.0.3"),
			wantAdd: routes("10.244.1.0/24", "172.30.0.3")},
		{name: "in sync", current: routes("10.244.1.0/24", "172.30.0.3"), desired: routes("10.244.1.0/24", "172.30.0.3")},
		{name: "node gone", current: routes("10.244.1.0/24", "172.30.0.3", "10.244.2.0/24", "172.30.0.4"),
			desired: routes("10.244.2.0/24", "172.30.0.4"), wantDel: routes("10.244.1.0/24", "172.30.0.3")},
		{name: "node moved", current: routes("10.244.1.0/24", "172.30.0.3"), desired: routes("10.244.1.0/24", "172.30.0.9"),
			wantAdd: routes("10.244.1.0/24", "172.30.0.9")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			add, del := DiffRoutes(tc.current, tc.desired)
			if !slices.Equal(add, tc.wantAdd) || !slices.Equal(del, tc.wantDel) {
				t.Errorf("add %v del %v, want add %v del %v", add, del, tc.wantAdd, tc.wantDel)
			}
		})
	}
}

func TestSelfPodCIDR(t *testing.T) {
	if _, err := SelfPodCIDR(node("n", ""), cluster); err == nil {
		t.Error("a node without podCIDR has no pod CIDR")
	}
	got, err := SelfPodCIDR(node("n", "10.244.5.0/24"), cluster)
	if err != nil || got.String() != "10.244.5.0/24" {
		t.Errorf("SelfPodCIDR = %v, %v", got, err)
	}
}

func TestMasqueradeRules(t *testing.T) {
	got := MasqueradeRules(cluster)
	want := `*nat
:MICROLET-PODNET-MASQ - [0:0]
-A MICROLET-PODNET-MASQ -d 10.244.0.0/16 -m comment --comment "podnet: pod to pod keeps its source" -j RETURN
-A MICROLET-PODNET-MASQ -m comment --comment "podnet: pod traffic leaving the pod network" -j MASQUERADE
COMMIT
`
	if got != want {
		t.Errorf("MasqueradeRules =\n%s\nwant\n%s", got, want)
	}
}
