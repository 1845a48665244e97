package external

import (
	"context"
	"log/slog"
	"sync"

	corev1 "k8s.io/api/core/v1"

	cloudproviderv1 "github.com/microlet/microlet/proto/microlet/cloudprovider/v1"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// Name is the provider's name in the config.
const Name = "external"

// Provider calls a plug-in about one node, the one cloudsyncd runs on.
type Provider struct {
	c    *Client
	node string

	mu         sync.Mutex
	providerID string
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider for the plug-in at endpoint, answering for node.
// It does not connect: the plug-in may start after cloudsyncd.
func New(endpoint, node string, log *slog.Logger) (*Provider, error) {
	c, err := Dial(endpoint, log)
	if err != nil {
		return nil, err
	}
	return &Provider{c: c, node: node}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Close implements provider.Provider.
func (p *Provider) Close() error { return p.c.Close() }

// ref names the node, with the provider ID learnt from an earlier answer.
func (p *Provider) ref() *cloudproviderv1.Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &cloudproviderv1.Node{Name: p.node, ProviderId: p.providerID}
}

// InstanceMetadata implements provider.Provider.
func (p *Provider) InstanceMetadata(ctx context.Context) (*provider.Metadata, error) {
	md, err := p.c.instanceMetadata(ctx, p.ref())
	if err != nil {
		return nil, err
	}
	if md.ProviderID != "" {
		p.mu.Lock()
		p.providerID = md.ProviderID
		p.mu.Unlock()
	}
	return &provider.Metadata{
		ProviderID:       md.ProviderID,
		InstanceType:     md.InstanceType,
		Zone:             md.Zone,
		Region:           md.Region,
		Addresses:        md.NodeAddresses,
		AdditionalLabels: md.AdditionalLabels,
	}, nil
}

// NodeAddresses implements provider.Provider from InstanceMetadata, as
// InstancesV2 does.
func (p *Provider) NodeAddresses(ctx context.Context) ([]corev1.NodeAddress, error) {
	md, err := p.InstanceMetadata(ctx)
	if err != nil {
		return nil, err
	}
	return md.Addresses, nil
}

// InstanceShutdown implements provider.Provider.
func (p *Provider) InstanceShutdown(ctx context.Context) (bool, error) {
	return p.c.instanceShutdown(ctx, p.ref())
}
