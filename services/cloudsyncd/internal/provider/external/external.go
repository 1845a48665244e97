package external

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	cloudproviderv1 "github.com/microlet/microlet/proto/microlet/cloudprovider/v1"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// Name is the provider's name in the config.
const Name = "external"

var addressTypes = map[cloudproviderv1.NodeAddressType]corev1.NodeAddressType{
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_HOSTNAME:     corev1.NodeHostName,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP:  corev1.NodeInternalIP,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_IP:  corev1.NodeExternalIP,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_DNS: corev1.NodeInternalDNS,
	cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_DNS: corev1.NodeExternalDNS,
}

// Provider calls a plug-in.
type Provider struct {
	cc       *grpc.ClientConn
	identity cloudproviderv1.IdentityServiceClient
	inst     cloudproviderv1.InstancesServiceClient
	node     string
	log      *slog.Logger

	mu         sync.Mutex
	info       *cloudproviderv1.GetInfoResponse
	providerID string
}

var _ provider.Provider = (*Provider)(nil)

// New returns a provider for the plug-in at endpoint, answering for node.
// It does not connect: the plug-in may start after cloudsyncd.
func New(endpoint, node string, log *slog.Logger) (*Provider, error) {
	cc, err := grpcclient.Dial(endpoint)
	if err != nil {
		return nil, fmt.Errorf("external_endpoint: %w", err)
	}
	return &Provider{
		cc:       cc,
		identity: cloudproviderv1.NewIdentityServiceClient(cc),
		inst:     cloudproviderv1.NewInstancesServiceClient(cc),
		node:     node,
		log:      log,
	}, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Close implements provider.Provider.
func (p *Provider) Close() error { return p.cc.Close() }

// ensure asks the plug-in who it is when that is not known, and refuses a
// plug-in that does not serve instances.
func (p *Provider) ensure(ctx context.Context) (*cloudproviderv1.Node, error) {
	p.mu.Lock()
	info, pid := p.info, p.providerID
	p.mu.Unlock()
	if info == nil {
		var err error
		info, err = p.identity.GetInfo(ctx, &cloudproviderv1.GetInfoRequest{})
		if err != nil {
			return nil, p.fail("GetInfo", err)
		}
		if !slices.Contains(info.GetCapabilities(), cloudproviderv1.Capability_CAPABILITY_INSTANCES) {
			return nil, fmt.Errorf("plug-in %q does not have CAPABILITY_INSTANCES", info.GetName())
		}
		p.log.Info("external cloud provider connected", "name", info.GetName(), "version", info.GetVendorVersion())
		p.mu.Lock()
		p.info = info
		p.mu.Unlock()
	}
	return &cloudproviderv1.Node{Name: p.node, ProviderId: pid}, nil
}

// fail wraps a call's error and forgets the plug-in's identity when it was
// unreachable, since the process answering next may be another one.
func (p *Provider) fail(call string, err error) error {
	if c := status.Code(err); c == codes.Unavailable || c == codes.DeadlineExceeded || c == codes.Canceled {
		p.mu.Lock()
		p.info = nil
		p.mu.Unlock()
	}
	st := status.Convert(err)
	return fmt.Errorf("plug-in %s: %s: %s", call, st.Code(), st.Message())
}

// InstanceMetadata implements provider.Provider.
func (p *Provider) InstanceMetadata(ctx context.Context) (*provider.Metadata, error) {
	n, err := p.ensure(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := p.inst.InstanceMetadata(ctx, &cloudproviderv1.InstanceMetadataRequest{Node: n})
	if err != nil {
		return nil, p.fail("InstanceMetadata", err)
	}
	md := &provider.Metadata{
		ProviderID:       resp.GetProviderId(),
		InstanceType:     resp.GetInstanceType(),
		Zone:             resp.GetZone(),
		Region:           resp.GetRegion(),
		AdditionalLabels: resp.GetAdditionalLabels(),
	}
	for i, a := range resp.GetNodeAddresses() {
		t, ok := addressTypes[a.GetType()]
		if !ok {
			return nil, fmt.Errorf("plug-in InstanceMetadata: node_addresses[%d].type %s is not a known address type", i, a.GetType())
		}
		md.Addresses = append(md.Addresses, corev1.NodeAddress{Type: t, Address: a.GetAddress()})
	}
	if md.ProviderID != "" {
		p.mu.Lock()
		p.providerID = md.ProviderID
		p.mu.Unlock()
	}
	return md, nil
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
	n, err := p.ensure(ctx)
	if err != nil {
		return false, err
	}
	resp, err := p.inst.InstanceShutdown(ctx, &cloudproviderv1.InstanceShutdownRequest{Node: n})
	if err != nil {
		return false, p.fail("InstanceShutdown", err)
	}
	return resp.GetShutdown(), nil
}
