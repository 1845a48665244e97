package nodeinit

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// src is a fixed answer; the real providers are tested in their packages and
// the whole controller against the real API server in package server.
type src struct {
	md   provider.Metadata
	down bool
}

func (s *src) NodeAddresses(context.Context) ([]corev1.NodeAddress, error) {
	return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.3.0.1"}}, nil
}
func (s *src) InstanceMetadata(context.Context) (*provider.Metadata, error) {
	md := s.md
	return &md, nil
}
func (s *src) InstanceShutdown(context.Context) (bool, error) { return s.down, nil }

// TestReconcileUnit pins the decisions: an existing providerID is kept, other
// taints survive, addresses fall back to NodeAddresses, the shutdown taint
// follows the provider.
func TestReconcileUnit(t *testing.T) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"keep": "me"}},
		Spec: corev1.NodeSpec{ProviderID: "preset://1", Taints: []corev1.Taint{
			{Key: "other", Effect: corev1.TaintEffectNoExecute},
			{Key: uninitializedTaint.Key, Effect: corev1.TaintEffectNoSchedule},
		}},
	}
	cs := fake.NewClientset(node)
	s := &src{md: provider.Metadata{ProviderID: "new://2", InstanceType: "t", Zone: "z"}}
	c := New(cs, "n1", s)
	ctx := context.Background()
	get := func() *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := c.Reconcile(ctx, get()); err != nil {
		t.Fatal(err)
	}
	n := get()
	if n.Spec.ProviderID != "preset://1" {
		t.Errorf("providerID %q: an existing one must be kept", n.Spec.ProviderID)
	}
	if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != "other" {
		t.Errorf("taints %v, want only the unrelated one left", n.Spec.Taints)
	}
	for k, v := range map[string]string{
		"keep": "me", corev1.LabelInstanceTypeStable: "t", corev1.LabelInstanceType: "t",
		corev1.LabelTopologyZone: "z", corev1.LabelFailureDomainBetaZone: "z",
	} {
		if n.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if _, ok := n.Labels[corev1.LabelTopologyRegion]; ok {
		t.Error("an empty region must not become a label")
	}
	if len(n.Status.Addresses) != 1 || n.Status.Addresses[0].Address != "10.3.0.1" {
		t.Errorf("addresses %v", n.Status.Addresses)
	}

	s.down = true
	if err := c.Reconcile(ctx, get()); err != nil {
		t.Fatal(err)
	}
	if !hasTaint(get(), shutdownTaint.Key) {
		t.Fatal("shutdown taint missing")
	}
	s.down = false
	if err := c.Reconcile(ctx, get()); err != nil {
		t.Fatal(err)
	}
	if n := get(); hasTaint(n, shutdownTaint.Key) || !hasTaint(n, "other") {
		t.Fatalf("taints %v", n.Spec.Taints)
	}
}

// TestInitialiseKeepsAddressesOfOneType: the provider's addresses replace the
// Node's whole, two InternalIPs (IPv4 and IPv6) included, whether the Node had
// addresses before or none.
func TestInitialiseKeepsAddressesOfOneType(t *testing.T) {
	want := []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.3.0.7"},
		{Type: corev1.NodeInternalIP, Address: "fd00::7"},
		{Type: corev1.NodeHostName, Address: "n1"},
	}
	for name, before := range map[string][]corev1.NodeAddress{
		"none":  nil,
		"other": {{Type: corev1.NodeInternalIP, Address: "10.3.0.1"}, {Type: corev1.NodeExternalIP, Address: "192.0.2.1"}},
	} {
		t.Run(name, func(t *testing.T) {
			node := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Spec:       corev1.NodeSpec{Taints: []corev1.Taint{*uninitializedTaint}},
				Status:     corev1.NodeStatus{Addresses: before},
			}
			cs := fake.NewClientset(node)
			ctx := context.Background()
			if err := New(cs, "n1", &src{md: provider.Metadata{Addresses: want}}).Reconcile(ctx, node); err != nil {
				t.Fatal(err)
			}
			n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(n.Status.Addresses, want) {
				t.Errorf("addresses %v, want %v", n.Status.Addresses, want)
			}
		})
	}
}
