package cloud

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// oneInstance is a node-mode provider that knows one instance, as the
// metadata service does.
type oneInstance struct{}

func (oneInstance) Name() string { return "metadata" }
func (oneInstance) NodeAddresses(context.Context) ([]corev1.NodeAddress, error) {
	return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}}, nil
}
func (oneInstance) InstanceMetadata(context.Context) (*provider.Metadata, error) {
	return &provider.Metadata{ProviderID: "aws:///z1/i-1", Zone: "z1"}, nil
}
func (oneInstance) InstanceShutdown(context.Context) (bool, error) { return true, nil }
func (oneInstance) Close() error                                   { return nil }

func TestOwnNodeAnswersForItsNodeOnly(t *testing.T) {
	c := newOwnNode(oneInstance{}, "self")
	inst, _ := c.InstancesV2()
	ctx := context.Background()
	for _, n := range []*corev1.Node{node("self", ""), node("renamed", "aws:///z1/i-1")} {
		md, err := inst.InstanceMetadata(ctx, n)
		if err != nil || md.ProviderID != "aws:///z1/i-1" || md.Zone != "z1" || len(md.NodeAddresses) != 1 || md.NodeAddresses[0].Address != "10.1.2.3" {
			t.Fatalf("%s: metadata %+v %v", n.Name, md, err)
		}
		if ok, err := inst.InstanceExists(ctx, n); err != nil || !ok {
			t.Fatalf("%s: exists %v %v", n.Name, ok, err)
		}
		if down, err := inst.InstanceShutdown(ctx, n); err != nil || !down {
			t.Fatalf("%s: shutdown %v %v", n.Name, down, err)
		}
	}
	// Another node: an error, never "does not exist", so nothing is deleted.
	ok, err := inst.InstanceExists(ctx, node("other", "aws:///z1/i-2"))
	if err == nil || ok || !strings.Contains(err.Error(), `answers only for its own node "self", not "other"`) {
		t.Fatalf("other node: %v %v", ok, err)
	}
}
