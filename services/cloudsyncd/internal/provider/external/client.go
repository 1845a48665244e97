package external

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/internal/grpcclient"
	cloudproviderv1 "github.com/microlet/microlet/proto/microlet/cloudprovider/v1"
)

// Capabilities a plug-in may list in GetInfo.
const (
	CapabilityInstances    = cloudproviderv1.Capability_CAPABILITY_INSTANCES
	CapabilityLoadBalancer = cloudproviderv1.Capability_CAPABILITY_LOAD_BALANCER
	CapabilityRoutes       = cloudproviderv1.Capability_CAPABILITY_ROUTES
)

// capabilityWait bounds how long HasCapability waits for a plug-in that is
// not answering yet (it may be starting beside cloudsyncd).
const capabilityWait = 10 * time.Second

// Client is a connection to a plug-in that answers for any node of the
// cluster: it implements k8s.io/cloud-provider's InstancesV2, LoadBalancer
// and Routes over the plug-in's services.
type Client struct {
	cc       *grpc.ClientConn
	identity cloudproviderv1.IdentityServiceClient
	inst     cloudproviderv1.InstancesServiceClient
	lb       cloudproviderv1.LoadBalancerServiceClient
	routes   cloudproviderv1.RoutesServiceClient
	log      *slog.Logger

	mu   sync.Mutex
	info *cloudproviderv1.GetInfoResponse
}

var (
	_ cloudprovider.InstancesV2  = (*Client)(nil)
	_ cloudprovider.LoadBalancer = (*Client)(nil)
	_ cloudprovider.Routes       = (*Client)(nil)
)

// Dial returns a client of the plug-in at endpoint. It does not connect: the
// plug-in may start after cloudsyncd.
func Dial(endpoint string, log *slog.Logger) (*Client, error) {
	cc, err := grpcclient.Dial(endpoint)
	if err != nil {
		return nil, fmt.Errorf("external_endpoint: %w", err)
	}
	return &Client{
		cc:       cc,
		identity: cloudproviderv1.NewIdentityServiceClient(cc),
		inst:     cloudproviderv1.NewInstancesServiceClient(cc),
		lb:       cloudproviderv1.NewLoadBalancerServiceClient(cc),
		routes:   cloudproviderv1.NewRoutesServiceClient(cc),
		log:      log,
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }

// Info returns the plug-in's identity, asking it when it is not known.
func (c *Client) Info(ctx context.Context, opts ...grpc.CallOption) (*cloudproviderv1.GetInfoResponse, error) {
	c.mu.Lock()
	info := c.info
	c.mu.Unlock()
	if info != nil {
		return info, nil
	}
	info, err := c.identity.GetInfo(ctx, &cloudproviderv1.GetInfoRequest{}, opts...)
	if err != nil {
		return nil, c.fail("GetInfo", err)
	}
	c.log.Info("external cloud provider connected", "name", info.GetName(), "version", info.GetVendorVersion(), "capabilities", info.GetCapabilities())
	c.mu.Lock()
	c.info = info
	c.mu.Unlock()
	return info, nil
}

// require fails unless the plug-in lists capability.
func (c *Client) require(ctx context.Context, capability cloudproviderv1.Capability) error {
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(info.GetCapabilities(), capability) {
		return fmt.Errorf("plug-in %q does not have %s", info.GetName(), capability)
	}
	return nil
}

// HasCapability reports whether the plug-in lists capability, waiting up to
// 10 s for a plug-in that is not reachable yet. An unreachable plug-in has
// no capability; the answer is asked again next time.
func (c *Client) HasCapability(capability cloudproviderv1.Capability) bool {
	ctx, cancel := context.WithTimeout(context.Background(), capabilityWait)
	defer cancel()
	info, err := c.Info(ctx, grpc.WaitForReady(true))
	if err != nil {
		c.log.Warn("external cloud provider: cannot ask its capabilities", "capability", capability, "err", err)
		return false
	}
	return slices.Contains(info.GetCapabilities(), capability)
}

// fail wraps a call's error and forgets the plug-in's identity when it was
// unreachable, since the process answering next may be another one. A
// NotFound from an instance call becomes cloudprovider.InstanceNotFound.
func (c *Client) fail(call string, err error) error {
	if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.Canceled {
		c.mu.Lock()
		c.info = nil
		c.mu.Unlock()
	}
	st := status.Convert(err)
	if st.Code() == codes.NotFound && strings.HasPrefix(call, "Instance") {
		return fmt.Errorf("plug-in %s: %s: %w", call, st.Message(), cloudprovider.InstanceNotFound)
	}
	return fmt.Errorf("plug-in %s: %s: %s", call, st.Code(), st.Message())
}

func nodeRef(node *corev1.Node) (*cloudproviderv1.Node, error) {
	if node == nil {
		return nil, errors.New("node is nil")
	}
	return &cloudproviderv1.Node{Name: node.Name, ProviderId: node.Spec.ProviderID}, nil
}

// InstanceExists implements cloudprovider.InstancesV2.
func (c *Client) InstanceExists(ctx context.Context, node *corev1.Node) (bool, error) {
	n, err := nodeRef(node)
	if err != nil {
		return false, err
	}
	return c.instanceExists(ctx, n)
}

func (c *Client) instanceExists(ctx context.Context, n *cloudproviderv1.Node) (bool, error) {
	if err := c.require(ctx, CapabilityInstances); err != nil {
		return false, err
	}
	resp, err := c.inst.InstanceExists(ctx, &cloudproviderv1.InstanceExistsRequest{Node: n})
	if err != nil {
		return false, c.fail("InstanceExists", err)
	}
	return resp.GetExists(), nil
}

// InstanceShutdown implements cloudprovider.InstancesV2.
func (c *Client) InstanceShutdown(ctx context.Context, node *corev1.Node) (bool, error) {
	n, err := nodeRef(node)
	if err != nil {
		return false, err
	}
	return c.instanceShutdown(ctx, n)
}

func (c *Client) instanceShutdown(ctx context.Context, n *cloudproviderv1.Node) (bool, error) {
	if err := c.require(ctx, CapabilityInstances); err != nil {
		return false, err
	}
	resp, err := c.inst.InstanceShutdown(ctx, &cloudproviderv1.InstanceShutdownRequest{Node: n})
	if err != nil {
		return false, c.fail("InstanceShutdown", err)
	}
	return resp.GetShutdown(), nil
}

// InstanceMetadata implements cloudprovider.InstancesV2.
func (c *Client) InstanceMetadata(ctx context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	n, err := nodeRef(node)
	if err != nil {
		return nil, err
	}
	return c.instanceMetadata(ctx, n)
}

func (c *Client) instanceMetadata(ctx context.Context, n *cloudproviderv1.Node) (*cloudprovider.InstanceMetadata, error) {
	if err := c.require(ctx, CapabilityInstances); err != nil {
		return nil, err
	}
	resp, err := c.inst.InstanceMetadata(ctx, &cloudproviderv1.InstanceMetadataRequest{Node: n})
	if err != nil {
		return nil, c.fail("InstanceMetadata", err)
	}
	addrs, err := fromAddresses("node_addresses", resp.GetNodeAddresses())
	if err != nil {
		return nil, fmt.Errorf("plug-in InstanceMetadata: %w", err)
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:       resp.GetProviderId(),
		InstanceType:     resp.GetInstanceType(),
		Zone:             resp.GetZone(),
		Region:           resp.GetRegion(),
		NodeAddresses:    addrs,
		AdditionalLabels: resp.GetAdditionalLabels(),
	}, nil
}
