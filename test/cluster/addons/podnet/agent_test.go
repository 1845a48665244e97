package podnet

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// newNetns makes a network namespace with a bridge holding
// 172.30.99.1/24, so gateways in that subnet are on-link, and returns a
// netlink handle into it. The test's thread is back in its own namespace
// when it returns.
func newNetns(t *testing.T) *netlink.Handle {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		testenv.RequireOrSkip(t, "no network namespace (needs CAP_SYS_ADMIN): %v", err)
		return nil
	}
	if err := netns.Set(orig); err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); ns.Close() })
	link := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "cluster0"}}
	if err := h.LinkAdd(link); err != nil {
		t.Fatal(err)
	}
	addr, _ := netlink.ParseAddr("172.30.99.1/24")
	if err := h.AddrAdd(link, addr); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	return h
}

// countingMasq counts EnsureMasquerade calls; TestEnsureMasqueradeInNetns
// runs the real iptables.
type countingMasq struct {
	mu    sync.Mutex
	calls int
}

func (c *countingMasq) EnsureMasquerade(context.Context, netip.Prefix) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	return nil
}

// TestAgentAgainstAPIServer runs the agent against a real kube-apiserver
// with Nodes the test creates, programming routes into a network namespace
// of its own, and follows it through a node joining, moving and leaving.
func TestAgentAgainstAPIServer(t *testing.T) {
	h := newNetns(t)
	cp := controlplane.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	mkNode := func(name, cidr, ip string) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setIP(ctx, t, cs, n, ip)
	}
	mkNode("podnet-self", "10.244.1.0/24", "172.30.99.1")
	mkNode("podnet-b", "10.244.2.0/24", "172.30.99.2")
	mkNode("podnet-c", "10.244.3.0/24", "172.30.99.3")
	t.Cleanup(func() {
		for _, n := range []string{"podnet-self", "podnet-b", "podnet-c"} {
			_ = cs.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})

	// A route podnet does not own, inside the cluster CIDR: it must survive.
	foreign := &netlink.Route{Dst: mustIPNet("10.244.200.0/24"), Gw: net.ParseIP("172.30.99.200")}
	if err := h.RouteAdd(foreign); err != nil {
		t.Fatal(err)
	}

	confDir := filepath.Join(t.TempDir(), "net.d")
	masq := &countingMasq{}
	rt := NetlinkRoutes{Handle: h}
	a, err := New(Config{NodeName: "podnet-self", ClusterCIDR: "10.244.0.0/16", CNIConfDir: confDir, Resync: time.Hour},
		cs, WithRouteTable(rt), WithMasquerader(masq))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	waitRoutes := func(want []Route) {
		t.Helper()
		var got []Route
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			got, err = rt.List()
			if err != nil {
				return false, err
			}
			slices.SortFunc(got, func(a, b Route) int { return a.Dst.Addr().Compare(b.Dst.Addr()) })
			return slices.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("routes %v, want %v: %v", got, want, err)
		}
	}
	waitRoutes(routes("10.244.2.0/24", "172.30.99.2", "10.244.3.0/24", "172.30.99.3"))

	data, err := os.ReadFile(filepath.Join(confDir, ConflistName))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := Conflist("10.244.1.0/24")
	if string(data) != string(want) {
		t.Errorf("conflist:\n%s\nwant\n%s", data, want)
	}

	// Node b moves to a new address; node c leaves.
	b, err := cs.CoreV1().Nodes().Get(ctx, "podnet-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	setIP(ctx, t, cs, b, "172.30.99.22")
	if err := cs.CoreV1().Nodes().Delete(ctx, "podnet-c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoutes(routes("10.244.2.0/24", "172.30.99.22"))

	// The foreign route is untouched, and masquerade was ensured.
	all, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(all, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == "10.244.200.0/24" }) {
		t.Errorf("podnet removed a route it does not own: %v", all)
	}
	masq.mu.Lock()
	defer masq.mu.Unlock()
	if masq.calls == 0 {
		t.Error("EnsureMasquerade never called")
	}
}

func setIP(ctx context.Context, t testing.TB, cs kubernetes.Interface, n *corev1.Node, ip string) {
	t.Helper()
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: n.Name}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mustIPNet(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}
