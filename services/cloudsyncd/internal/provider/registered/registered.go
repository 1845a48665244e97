package registered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// Provider wraps a registered cloud provider for one node.
type Provider struct {
	name  string
	cloud cloudprovider.Interface
	node  string

	mu         sync.Mutex
	providerID string
}

var _ provider.Provider = (*Provider)(nil)

// Exists reports whether name was registered with RegisterCloudProvider.
func Exists(name string) bool { return cloudprovider.IsCloudProvider(name) }

// New builds the registered provider name with its config file (may be
// empty), answering for node. Errors name the setting at fault.
func New(name, configFile, node string) (*Provider, error) {
	cloud, err := Get(name, configFile)
	if err != nil {
		return nil, err
	}
	_, v2 := cloud.InstancesV2()
	_, v1 := cloud.Instances()
	if !v2 && !v1 {
		return nil, fmt.Errorf("cloud_provider %q: supports neither InstancesV2 nor Instances", name)
	}
	return &Provider{name: name, cloud: cloud, node: node}, nil
}

// Get builds the registered provider name with its config file (may be
// empty) as it is, for callers that answer for the whole cluster. Errors
// name the setting at fault.
func Get(name, configFile string) (cloudprovider.Interface, error) {
	if !cloudprovider.IsCloudProvider(name) {
		return nil, fmt.Errorf("cloud_provider %q: not a built-in provider (static, metadata, external, local) and not registered with k8s.io/cloud-provider", name)
	}
	var cfg io.Reader
	if configFile != "" {
		f, err := os.Open(configFile)
		if err != nil {
			return nil, fmt.Errorf("cloud_config: %w", err)
		}
		defer f.Close()
		cfg = f
	}
	cloud, err := cloudprovider.GetCloudProvider(name, cfg)
	if err != nil {
		return nil, fmt.Errorf("cloud_provider %q: %w", name, err)
	}
	if cloud == nil {
		return nil, fmt.Errorf("cloud_provider %q: its factory returned no provider", name)
	}
	return cloud, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return p.name }

// Close implements provider.Provider; cloud providers have no close.
func (p *Provider) Close() error { return nil }

// nodeObject is the Node InstancesV2 is asked about. cloudsyncd does not read
// the Node from the API server (it may run standalone), so the object carries
// the name and the provider ID learnt from an earlier answer.
func (p *Provider) nodeObject() *corev1.Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.node}, Spec: corev1.NodeSpec{ProviderID: p.providerID}}
}

func (p *Provider) remember(id string) {
	if id == "" {
		return
	}
	p.mu.Lock()
	p.providerID = id
	p.mu.Unlock()
}

// InstanceMetadata implements provider.Provider.
func (p *Provider) InstanceMetadata(ctx context.Context) (*provider.Metadata, error) {
	if v2, ok := p.cloud.InstancesV2(); ok {
		md, err := v2.InstanceMetadata(ctx, p.nodeObject())
		if err != nil {
			return nil, err
		}
		if md == nil {
			return nil, errors.New("instances: InstanceMetadata returned nothing")
		}
		p.remember(md.ProviderID)
		return &provider.Metadata{
			ProviderID: md.ProviderID, InstanceType: md.InstanceType,
			Zone: md.Zone, Region: md.Region,
			Addresses: md.NodeAddresses, AdditionalLabels: md.AdditionalLabels,
		}, nil
	}
	inst, _ := p.cloud.Instances()
	name := types.NodeName(p.node)
	id, err := cloudprovider.GetInstanceProviderID(ctx, p.cloud, name)
	if err != nil {
		return nil, err
	}
	p.remember(id)
	md := &provider.Metadata{ProviderID: id}
	if md.InstanceType, err = inst.InstanceType(ctx, name); err != nil {
		return nil, fmt.Errorf("instance type: %w", err)
	}
	if md.Addresses, err = inst.NodeAddresses(ctx, name); err != nil {
		return nil, fmt.Errorf("node addresses: %w", err)
	}
	if zones, ok := p.cloud.Zones(); ok {
		z, err := zones.GetZoneByNodeName(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("zone: %w", err)
		}
		md.Zone, md.Region = z.FailureDomain, z.Region
	}
	return md, nil
}

// NodeAddresses implements provider.Provider.
func (p *Provider) NodeAddresses(ctx context.Context) ([]corev1.NodeAddress, error) {
	if _, ok := p.cloud.InstancesV2(); ok {
		md, err := p.InstanceMetadata(ctx)
		if err != nil {
			return nil, err
		}
		return md.Addresses, nil
	}
	inst, _ := p.cloud.Instances()
	return inst.NodeAddresses(ctx, types.NodeName(p.node))
}

// InstanceShutdown implements provider.Provider.
func (p *Provider) InstanceShutdown(ctx context.Context) (bool, error) {
	if v2, ok := p.cloud.InstancesV2(); ok {
		return v2.InstanceShutdown(ctx, p.nodeObject())
	}
	inst, _ := p.cloud.Instances()
	id := p.nodeObject().Spec.ProviderID
	if id == "" {
		var err error
		if id, err = cloudprovider.GetInstanceProviderID(ctx, p.cloud, types.NodeName(p.node)); err != nil {
			return false, err
		}
		p.remember(id)
	}
	return inst.InstanceShutdownByProviderID(ctx, id)
}
