package external

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	cloudprovider "k8s.io/cloud-provider"

	cloudproviderv1 "github.com/microlet/microlet/proto/microlet/cloudprovider/v1"
)

func (c *Client) lbService(ctx context.Context, clusterName string, svc *corev1.Service) (*cloudproviderv1.Service, error) {
	if svc == nil {
		return nil, errors.New("service is nil")
	}
	if err := c.require(ctx, CapabilityLoadBalancer); err != nil {
		return nil, err
	}
	return toService(svc, c.GetLoadBalancerName(ctx, clusterName, svc)), nil
}

// GetLoadBalancer implements cloudprovider.LoadBalancer.
func (c *Client) GetLoadBalancer(ctx context.Context, clusterName string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	s, err := c.lbService(ctx, clusterName, svc)
	if err != nil {
		return nil, false, err
	}
	resp, err := c.lb.GetLoadBalancer(ctx, &cloudproviderv1.GetLoadBalancerRequest{ClusterName: clusterName, Service: s})
	if err != nil {
		return nil, false, c.fail("GetLoadBalancer", err)
	}
	if !resp.GetExists() {
		return nil, false, nil
	}
	st, err := fromStatus(resp.GetStatus())
	if err != nil {
		return nil, false, fmt.Errorf("plug-in GetLoadBalancer: %w", err)
	}
	return st, true, nil
}

// GetLoadBalancerName implements cloudprovider.LoadBalancer with upstream's
// default name, derived from the Service's UID.
func (c *Client) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// EnsureLoadBalancer implements cloudprovider.LoadBalancer.
func (c *Client) EnsureLoadBalancer(ctx context.Context, clusterName string, svc *corev1.Service, nodes []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	s, err := c.lbService(ctx, clusterName, svc)
	if err != nil {
		return nil, err
	}
	resp, err := c.lb.EnsureLoadBalancer(ctx, &cloudproviderv1.EnsureLoadBalancerRequest{ClusterName: clusterName, Service: s, Nodes: toNodes(nodes)})
	if err != nil {
		return nil, c.lbFail("EnsureLoadBalancer", svc, err)
	}
	st, err := fromStatus(resp.GetStatus())
	if err != nil {
		return nil, fmt.Errorf("plug-in EnsureLoadBalancer: %w", err)
	}
	return st, nil
}

// UpdateLoadBalancer implements cloudprovider.LoadBalancer.
func (c *Client) UpdateLoadBalancer(ctx context.Context, clusterName string, svc *corev1.Service, nodes []*corev1.Node) error {
	s, err := c.lbService(ctx, clusterName, svc)
	if err != nil {
		return err
	}
	if _, err := c.lb.UpdateLoadBalancer(ctx, &cloudproviderv1.UpdateLoadBalancerRequest{ClusterName: clusterName, Service: s, Nodes: toNodes(nodes)}); err != nil {
		return c.lbFail("UpdateLoadBalancer", svc, err)
	}
	return nil
}

// EnsureLoadBalancerDeleted implements cloudprovider.LoadBalancer.
func (c *Client) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, svc *corev1.Service) error {
	s, err := c.lbService(ctx, clusterName, svc)
	if err != nil {
		return err
	}
	if _, err := c.lb.EnsureLoadBalancerDeleted(ctx, &cloudproviderv1.EnsureLoadBalancerDeletedRequest{ClusterName: clusterName, Service: s}); err != nil {
		return c.lbFail("EnsureLoadBalancerDeleted", svc, err)
	}
	return nil
}

// lbFail names the Service in a balancer call's error.
func (c *Client) lbFail(call string, svc *corev1.Service, err error) error {
	return fmt.Errorf("%s: %w", types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}, c.fail(call, err))
}

// ListRoutes implements cloudprovider.Routes.
func (c *Client) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	if err := c.require(ctx, CapabilityRoutes); err != nil {
		return nil, err
	}
	resp, err := c.routes.ListRoutes(ctx, &cloudproviderv1.ListRoutesRequest{ClusterName: clusterName})
	if err != nil {
		return nil, c.fail("ListRoutes", err)
	}
	out := make([]*cloudprovider.Route, 0, len(resp.GetRoutes()))
	for i, r := range resp.GetRoutes() {
		addrs, err := fromAddresses(fmt.Sprintf("routes[%d].target_node_addresses", i), r.GetTargetNodeAddresses())
		if err != nil {
			return nil, fmt.Errorf("plug-in ListRoutes: %w", err)
		}
		out = append(out, &cloudprovider.Route{
			Name:                r.GetName(),
			TargetNode:          types.NodeName(r.GetTargetNode()),
			EnableNodeAddresses: len(addrs) > 0,
			TargetNodeAddresses: addrs,
			DestinationCIDR:     r.GetDestinationCidr(),
			Blackhole:           r.GetBlackhole(),
		})
	}
	return out, nil
}

func toRoute(r *cloudprovider.Route) *cloudproviderv1.Route {
	return &cloudproviderv1.Route{
		Name:                r.Name,
		TargetNode:          string(r.TargetNode),
		TargetNodeAddresses: toAddresses(r.TargetNodeAddresses),
		DestinationCidr:     r.DestinationCIDR,
		Blackhole:           r.Blackhole,
	}
}

// CreateRoute implements cloudprovider.Routes.
func (c *Client) CreateRoute(ctx context.Context, clusterName, nameHint string, route *cloudprovider.Route) error {
	if route == nil {
		return errors.New("route is nil")
	}
	if err := c.require(ctx, CapabilityRoutes); err != nil {
		return err
	}
	if _, err := c.routes.CreateRoute(ctx, &cloudproviderv1.CreateRouteRequest{ClusterName: clusterName, NameHint: nameHint, Route: toRoute(route)}); err != nil {
		return c.fail("CreateRoute", err)
	}
	return nil
}

// DeleteRoute implements cloudprovider.Routes.
func (c *Client) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	if route == nil {
		return errors.New("route is nil")
	}
	if err := c.require(ctx, CapabilityRoutes); err != nil {
		return err
	}
	if _, err := c.routes.DeleteRoute(ctx, &cloudproviderv1.DeleteRouteRequest{ClusterName: clusterName, Route: toRoute(route)}); err != nil {
		return c.fail("DeleteRoute", err)
	}
	return nil
}
