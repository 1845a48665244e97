package cloud

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// ownNodeCloud serves a node-mode provider that can only speak for the
// instance it runs on (the metadata service): it answers for that node and
// refuses the others with an error, which the controllers log and retry
// rather than acting on.
type ownNodeCloud struct {
	base
	p    provider.Provider
	node string
}

func newOwnNode(p provider.Provider, node string) *ownNodeCloud {
	return &ownNodeCloud{base: base{name: p.Name()}, p: p, node: node}
}

// InstancesV2 implements cloudprovider.Interface.
func (o *ownNodeCloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return o, true }

// Close implements Cloud.
func (o *ownNodeCloud) Close() error { return o.p.Close() }

// check refuses nodes other than the provider's own. A node whose provider
// ID is the instance's is its own too, whatever its name.
func (o *ownNodeCloud) check(ctx context.Context, node *corev1.Node) (*provider.Metadata, error) {
	if node == nil {
		return nil, errNoNode
	}
	md, err := o.p.InstanceMetadata(ctx)
	if err != nil {
		return nil, err
	}
	if node.Name == o.node || (node.Spec.ProviderID != "" && node.Spec.ProviderID == md.ProviderID) {
		return md, nil
	}
	return nil, fmt.Errorf("cloud_provider %s: answers only for its own node %q, not %q", o.p.Name(), o.node, node.Name)
}

// InstanceExists implements cloudprovider.InstancesV2.
func (o *ownNodeCloud) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	if _, err := o.check(ctx, node); err != nil {
		return false, err
	}
	return true, nil
}

// InstanceShutdown implements cloudprovider.InstancesV2.
func (o *ownNodeCloud) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	if _, err := o.check(ctx, node); err != nil {
		return false, err
	}
	return o.p.InstanceShutdown(ctx)
}

// InstanceMetadata implements cloudprovider.InstancesV2.
func (o *ownNodeCloud) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	md, err := o.check(ctx, node)
	if err != nil {
		return nil, err
	}
	if len(md.Addresses) == 0 {
		// The metadata provider reports addresses through NodeAddresses only.
		if md.Addresses, err = o.p.NodeAddresses(ctx); err != nil {
			return nil, err
		}
	}
	return toInstanceMetadata(md), nil
}

func toInstanceMetadata(md *provider.Metadata) *cloudprovider.InstanceMetadata {
	return &cloudprovider.InstanceMetadata{
		ProviderID:       md.ProviderID,
		InstanceType:     md.InstanceType,
		Zone:             md.Zone,
		Region:           md.Region,
		NodeAddresses:    md.Addresses,
		AdditionalLabels: md.AdditionalLabels,
	}
}
