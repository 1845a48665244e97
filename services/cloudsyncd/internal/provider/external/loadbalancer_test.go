package external

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"
)

const lbConfig = `name: lbx
load_balancer_pool: [203.0.113.10, 203.0.113.11]
routes: true
nodes:
  node-a:
    provider_id: lbx://z1/node-a
    addresses:
    - {type: InternalIP, address: 10.0.0.1}
`

func lbService(name, uid, lbIP string, ports ...int32) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: k8stypes.UID("0000-" + uid)},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerIP: lbIP},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Protocol: corev1.ProtocolTCP, Port: p, NodePort: 30000 + p})
	}
	return svc
}

// TestExternalLoadBalancerAndRoutes drives the example plug-in, built and
// started here on a real unix socket, through the client's
// cloudprovider.LoadBalancer and cloudprovider.Routes.
func TestExternalLoadBalancerAndRoutes(t *testing.T) {
	bin := buildExample(t)
	dir, err := os.MkdirTemp("/tmp", "cslb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock, cfg := filepath.Join(dir, "cp.sock"), filepath.Join(dir, "cfg.yaml")
	if err := os.WriteFile(cfg, []byte(lbConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	startPlugin(t, bin, sock, cfg)
	c, err := Dial("unix://"+sock, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.HasCapability(CapabilityLoadBalancer) || !c.HasCapability(CapabilityRoutes) {
		t.Fatal("the plug-in lists CAPABILITY_LOAD_BALANCER and CAPABILITY_ROUTES")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nodes := []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}}}

	web := lbService("web", "1", "", 80)
	if _, exists, err := c.GetLoadBalancer(ctx, "k", web); err != nil || exists {
		t.Fatalf("before Ensure: exists=%v err=%v", exists, err)
	}
	st, err := c.EnsureLoadBalancer(ctx, "k", web, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IP != "203.0.113.10" || len(st.Ingress[0].Ports) != 1 || st.Ingress[0].Ports[0].Port != 80 {
		t.Fatalf("Ensure status %+v", st)
	}
	// Asking for the address another Service has is refused; the pool's
	// other address can be asked for.
	if _, err := c.EnsureLoadBalancer(ctx, "k", lbService("dns", "2", "203.0.113.10", 53), nodes); err == nil || !strings.Contains(err.Error(), "default/dns") {
		t.Fatalf("taken address: %v, want an error naming the Service", err)
	}
	if st, err := c.EnsureLoadBalancer(ctx, "k", lbService("dns", "2", "203.0.113.11", 53), nodes); err != nil || st.Ingress[0].IP != "203.0.113.11" {
		t.Fatalf("loadBalancerIP honoured: %+v %v", st, err)
	}
	// Ports change: the same address, the new ports.
	st, err = c.EnsureLoadBalancer(ctx, "k", lbService("web", "1", "", 80, 443), nodes)
	if err != nil || st.Ingress[0].IP != "203.0.113.10" || len(st.Ingress[0].Ports) != 2 {
		t.Fatalf("ports changed: %+v %v", st, err)
	}
	if err := c.UpdateLoadBalancer(ctx, "k", web, nil); err != nil {
		t.Fatal(err)
	}
	if st, exists, err := c.GetLoadBalancer(ctx, "k", web); err != nil || !exists || st.Ingress[0].IP != "203.0.113.10" {
		t.Fatalf("Get: %+v %v %v", st, exists, err)
	}
	for range 2 { // deleting is idempotent
		if err := c.EnsureLoadBalancerDeleted(ctx, "k", web); err != nil {
			t.Fatal(err)
		}
	}
	if _, exists, err := c.GetLoadBalancer(ctx, "k", web); err != nil || exists {
		t.Fatalf("after delete: exists=%v err=%v", exists, err)
	}

	route := &cloudprovider.Route{TargetNode: "node-a", DestinationCIDR: "10.244.1.0/24",
		TargetNodeAddresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}
	if err := c.CreateRoute(ctx, "k", "hint-a", route); err != nil {
		t.Fatal(err)
	}
	routes, err := c.ListRoutes(ctx, "k")
	if err != nil || len(routes) != 1 || routes[0].Name != "hint-a" || routes[0].TargetNode != "node-a" ||
		routes[0].DestinationCIDR != "10.244.1.0/24" || routes[0].TargetNodeAddresses[0].Address != "10.0.0.1" {
		t.Fatalf("ListRoutes = %+v, %v", routes, err)
	}
	if err := c.DeleteRoute(ctx, "k", routes[0]); err != nil {
		t.Fatal(err)
	}
	if routes, err := c.ListRoutes(ctx, "k"); err != nil || len(routes) != 0 {
		t.Fatalf("after DeleteRoute: %+v %v", routes, err)
	}

	// InstancesV2 for any node: a Node the plug-in does not know is gone.
	if ok, err := c.InstanceExists(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-z"}}); err != nil || ok {
		t.Fatalf("InstanceExists(node-z) = %v, %v", ok, err)
	}
	if _, err := c.InstanceMetadata(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-z"}}); !errors.Is(err, cloudprovider.InstanceNotFound) {
		t.Fatalf("InstanceMetadata(node-z): %v, want InstanceNotFound", err)
	}
	if md, err := c.InstanceMetadata(ctx, nodes[0]); err != nil || md.ProviderID != "lbx://z1/node-a" {
		t.Fatalf("InstanceMetadata(node-a) = %+v, %v", md, err)
	}
}

// TestExternalWithoutCapabilities: a plug-in that serves instances only has
// no load balancer, and the calls say so instead of failing obscurely.
func TestExternalWithoutCapabilities(t *testing.T) {
	bin := buildExample(t)
	dir, err := os.MkdirTemp("/tmp", "csnc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock, cfg := filepath.Join(dir, "cp.sock"), filepath.Join(dir, "cfg.yaml")
	writeConfig(t, cfg, "plain", "10.0.0.1", false)
	startPlugin(t, bin, sock, cfg)
	c, err := Dial("unix://"+sock, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.HasCapability(CapabilityLoadBalancer) || c.HasCapability(CapabilityRoutes) {
		t.Fatal("a plug-in without load_balancer_pool/routes must not list those capabilities")
	}
	if !c.HasCapability(CapabilityInstances) {
		t.Fatal("CAPABILITY_INSTANCES missing")
	}
	_, err = c.EnsureLoadBalancer(context.Background(), "k", lbService("web", "1", "", 80), nil)
	if err == nil || !strings.Contains(err.Error(), "CAPABILITY_LOAD_BALANCER") {
		t.Fatalf("EnsureLoadBalancer: %v, want an error naming the missing capability", err)
	}
}
