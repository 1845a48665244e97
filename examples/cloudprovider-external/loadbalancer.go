package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cloudproviderv1 "github.com/microlet/microlet/proto/microlet/cloudprovider/v1"
)

// balancer is one Service's load balancer.
type balancer struct {
	ip      string
	service *cloudproviderv1.Service
	nodes   []string
}

// balancers serves LoadBalancerService from memory.
type balancers struct {
	cloudproviderv1.UnimplementedLoadBalancerServiceServer
	p *plugin

	mu    sync.Mutex
	byUID map[string]*balancer
}

// pool returns the configured pool, refusing calls when there is none.
func (b *balancers) pool() ([]string, error) {
	c, err := b.p.load()
	if err != nil {
		return nil, err
	}
	if len(c.LoadBalancerPool) == 0 {
		return nil, status.Error(codes.FailedPrecondition, "load_balancer_pool is empty: this plug-in serves no load balancers")
	}
	return c.LoadBalancerPool, nil
}

func checkService(s *cloudproviderv1.Service) error {
	if s.GetUid() == "" || s.GetName() == "" || s.GetNamespace() == "" {
		return status.Error(codes.InvalidArgument, "service: namespace, name and uid are required")
	}
	return nil
}

func (b *balancers) statusOf(lb *balancer) *cloudproviderv1.LoadBalancerStatus {
	ing := &cloudproviderv1.LoadBalancerIngress{Ip: lb.ip, IpMode: cloudproviderv1.IPMode_IP_MODE_VIP}
	for _, port := range lb.service.GetPorts() {
		ing.Ports = append(ing.Ports, &cloudproviderv1.PortStatus{Port: port.GetPort(), Protocol: port.GetProtocol()})
	}
	return &cloudproviderv1.LoadBalancerStatus{Ingress: []*cloudproviderv1.LoadBalancerIngress{ing}}
}

// GetLoadBalancer implements LoadBalancerService.
func (b *balancers) GetLoadBalancer(_ context.Context, req *cloudproviderv1.GetLoadBalancerRequest) (*cloudproviderv1.GetLoadBalancerResponse, error) {
	if err := checkService(req.GetService()); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lb, ok := b.byUID[req.GetService().GetUid()]
	if !ok {
		return &cloudproviderv1.GetLoadBalancerResponse{}, nil
	}
	return &cloudproviderv1.GetLoadBalancerResponse{Exists: true, Status: b.statusOf(lb)}, nil
}

// EnsureLoadBalancer implements LoadBalancerService.
func (b *balancers) EnsureLoadBalancer(_ context.Context, req *cloudproviderv1.EnsureLoadBalancerRequest) (*cloudproviderv1.EnsureLoadBalancerResponse, error) {
	svc := req.GetService()
	if err := checkService(svc); err != nil {
		return nil, err
	}
	pool, err := b.pool()
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	used := map[string]string{}
	for uid, lb := range b.byUID {
		used[lb.ip] = uid
	}
	free := func(ip string) bool { u, ok := used[ip]; return !ok || u == svc.GetUid() }
	lb := b.byUID[svc.GetUid()]
	ip := ""
	switch want := svc.GetLoadBalancerIp(); {
	case want != "":
		if !slices.Contains(pool, want) {
			return nil, status.Errorf(codes.InvalidArgument, "load_balancer_ip %s is not in load_balancer_pool", want)
		}
		if !free(want) {
			return nil, status.Errorf(codes.AlreadyExists, "load_balancer_ip %s belongs to another Service", want)
		}
		ip = want
	case lb != nil:
		ip = lb.ip
	default:
		for _, a := range pool {
			if free(a) {
				ip = a
				break
			}
		}
		if ip == "" {
			return nil, status.Error(codes.ResourceExhausted, "load_balancer_pool: no free address")
		}
	}
	lb = &balancer{ip: ip, service: proto.CloneOf(svc), nodes: nodeNames(req.GetNodes())}
	b.byUID[svc.GetUid()] = lb
	log.Printf("load balancer %s for %s/%s: %s, ports %v, nodes %v", svc.GetLoadBalancerName(), svc.GetNamespace(), svc.GetName(), ip, portList(svc), lb.nodes)
	return &cloudproviderv1.EnsureLoadBalancerResponse{Status: b.statusOf(lb)}, nil
}

// UpdateLoadBalancer implements LoadBalancerService.
func (b *balancers) UpdateLoadBalancer(_ context.Context, req *cloudproviderv1.UpdateLoadBalancerRequest) (*cloudproviderv1.UpdateLoadBalancerResponse, error) {
	if err := checkService(req.GetService()); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lb, ok := b.byUID[req.GetService().GetUid()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no load balancer for %s/%s", req.GetService().GetNamespace(), req.GetService().GetName())
	}
	lb.nodes = nodeNames(req.GetNodes())
	log.Printf("load balancer %s: nodes %v", req.GetService().GetLoadBalancerName(), lb.nodes)
	return &cloudproviderv1.UpdateLoadBalancerResponse{}, nil
}

// EnsureLoadBalancerDeleted implements LoadBalancerService.
func (b *balancers) EnsureLoadBalancerDeleted(_ context.Context, req *cloudproviderv1.EnsureLoadBalancerDeletedRequest) (*cloudproviderv1.EnsureLoadBalancerDeletedResponse, error) {
	if err := checkService(req.GetService()); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.byUID[req.GetService().GetUid()]; ok {
		delete(b.byUID, req.GetService().GetUid())
		log.Printf("load balancer %s deleted", req.GetService().GetLoadBalancerName())
	}
	return &cloudproviderv1.EnsureLoadBalancerDeletedResponse{}, nil
}

func nodeNames(nodes []*cloudproviderv1.TargetNode) []string {
	out := make([]string, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.GetName())
	}
	slices.Sort(out)
	return out
}

func portList(svc *cloudproviderv1.Service) []string {
	out := make([]string, 0, len(svc.GetPorts()))
	for _, p := range svc.GetPorts() {
		out = append(out, fmt.Sprintf("%d/%s", p.GetPort(), p.GetProtocol()))
	}
	return out
}

// routeTable serves RoutesService from memory, keyed by destination CIDR.
type routeTable struct {
	cloudproviderv1.UnimplementedRoutesServiceServer
	p *plugin

	mu     sync.Mutex
	routes map[string]*cloudproviderv1.Route
}

func (r *routeTable) enabled() error {
	c, err := r.p.load()
	if err != nil {
		return err
	}
	if !c.Routes {
		return status.Error(codes.FailedPrecondition, "routes is false: this plug-in serves no routes")
	}
	return nil
}

// ListRoutes implements RoutesService.
func (r *routeTable) ListRoutes(context.Context, *cloudproviderv1.ListRoutesRequest) (*cloudproviderv1.ListRoutesResponse, error) {
	if err := r.enabled(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	resp := &cloudproviderv1.ListRoutesResponse{}
	for _, rt := range r.routes {
		resp.Routes = append(resp.Routes, proto.CloneOf(rt))
	}
	slices.SortFunc(resp.Routes, func(a, b *cloudproviderv1.Route) int {
		return cmp.Compare(a.GetDestinationCidr(), b.GetDestinationCidr())
	})
	return resp, nil
}

// CreateRoute implements RoutesService.
func (r *routeTable) CreateRoute(_ context.Context, req *cloudproviderv1.CreateRouteRequest) (*cloudproviderv1.CreateRouteResponse, error) {
	if err := r.enabled(); err != nil {
		return nil, err
	}
	rt := req.GetRoute()
	if rt.GetDestinationCidr() == "" || rt.GetTargetNode() == "" {
		return nil, status.Error(codes.InvalidArgument, "route: destination_cidr and target_node are required")
	}
	rt = proto.CloneOf(rt)
	if rt.GetName() == "" {
		rt.Name = req.GetNameHint()
	}
	r.mu.Lock()
	r.routes[rt.GetDestinationCidr()] = rt
	r.mu.Unlock()
	log.Printf("route %s: %s via %s", rt.GetName(), rt.GetDestinationCidr(), rt.GetTargetNode())
	return &cloudproviderv1.CreateRouteResponse{}, nil
}

// DeleteRoute implements RoutesService.
func (r *routeTable) DeleteRoute(_ context.Context, req *cloudproviderv1.DeleteRouteRequest) (*cloudproviderv1.DeleteRouteResponse, error) {
	if err := r.enabled(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	delete(r.routes, req.GetRoute().GetDestinationCidr())
	r.mu.Unlock()
	return &cloudproviderv1.DeleteRouteResponse{}, nil
}
