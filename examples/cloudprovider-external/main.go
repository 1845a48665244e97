// Command cloudprovider-external is an example cloud-provider plug-in for
// microlet: it serves proto/microlet/cloudprovider/v1 on a unix socket and
// answers from a YAML file, re-read on every call so edits apply at once.
//
// It uses only public packages (the generated API and grpc-go), as a plug-in
// written outside this repository would:
//
//	cloudprovider-external --socket /run/microlet/cloudprovider.sock --config instances.yaml
//
// with instances.yaml:
//
//	name: example
//	nodes:
//	  node-a:
//	    provider_id: example://eu-1/node-a
//	    instance_type: small
//	    zone: eu-1a
//	    region: eu-1
//	    shutdown: false
//	    labels: {example.com/rack: r1}
//	    addresses:
//	    - {type: InternalIP, address: 10.0.0.5}
//	load_balancer_pool: [203.0.113.10, 203.0.113.11]
//	routes: true
//
// A non-empty load_balancer_pool serves LoadBalancerService: each Service
// gets an address from the pool, stable per Service UID, or its
// load_balancer_ip when that is in the pool; the balancers are kept in
// memory (a real plug-in would program a cloud). routes: true serves
// RoutesService over an in-memory route table. GetInfo lists the
// capabilities accordingly.
//
// and cloudsyncd started with --cloud-provider external --external-endpoint
// unix:///run/microlet/cloudprovider.sock.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cloudproviderv1 "github.com/microlet/microlet/proto/microlet/cloudprovider/v1"
)

// version is reported by GetInfo.
const version = "v0.1.0"

// config is the YAML file.
type config struct {
	Name             string          `yaml:"name"`
	Nodes            map[string]node `yaml:"nodes"`
	LoadBalancerPool []string        `yaml:"load_balancer_pool"`
	Routes           bool            `yaml:"routes"`
}

type node struct {
	ProviderID   string            `yaml:"provider_id"`
	InstanceType string            `yaml:"instance_type"`
	Zone         string            `yaml:"zone"`
	Region       string            `yaml:"region"`
	Shutdown     bool              `yaml:"shutdown"`
	Gone         bool              `yaml:"gone"`
	Labels       map[string]string `yaml:"labels"`
	Addresses    []struct {
		Type    string `yaml:"type"`
		Address string `yaml:"address"`
	} `yaml:"addresses"`
}

var addressTypes = map[string]cloudproviderv1.NodeAddressType{
	"Hostname":    cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_HOSTNAME,
	"InternalIP":  cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_IP,
	"ExternalIP":  cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_IP,
	"InternalDNS": cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_INTERNAL_DNS,
	"ExternalDNS": cloudproviderv1.NodeAddressType_NODE_ADDRESS_TYPE_EXTERNAL_DNS,
}

type plugin struct {
	cloudproviderv1.UnimplementedIdentityServiceServer
	cloudproviderv1.UnimplementedInstancesServiceServer
	path string
	lbs  *balancers
	rt   *routeTable
}

func (p *plugin) load() (*config, error) {
	data, err := os.ReadFile(p.path)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "config: %v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c config
	if err := dec.Decode(&c); err != nil {
		return nil, status.Errorf(codes.Unavailable, "config %s: %v", p.path, err)
	}
	if c.Name == "" {
		c.Name = "example"
	}
	for i, a := range c.LoadBalancerPool {
		if _, err := netip.ParseAddr(a); err != nil {
			return nil, status.Errorf(codes.Unavailable, "config %s: load_balancer_pool[%d] %q: not an IP address", p.path, i, a)
		}
	}
	return &c, nil
}

func (p *plugin) lookup(n *cloudproviderv1.Node) (*node, error) {
	c, err := p.load()
	if err != nil {
		return nil, err
	}
	if n.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "node.name is empty")
	}
	nd, ok := c.Nodes[n.GetName()]
	if !ok || nd.Gone {
		return nil, status.Errorf(codes.NotFound, "no instance for node %q", n.GetName())
	}
	return &nd, nil
}

func (p *plugin) GetInfo(context.Context, *cloudproviderv1.GetInfoRequest) (*cloudproviderv1.GetInfoResponse, error) {
	c, err := p.load()
	if err != nil {
		return nil, err
	}
	caps := []cloudproviderv1.Capability{cloudproviderv1.Capability_CAPABILITY_INSTANCES}
	if len(c.LoadBalancerPool) > 0 {
		caps = append(caps, cloudproviderv1.Capability_CAPABILITY_LOAD_BALANCER)
	}
	if c.Routes {
		caps = append(caps, cloudproviderv1.Capability_CAPABILITY_ROUTES)
	}
	return &cloudproviderv1.GetInfoResponse{
		Name:          c.Name,
		VendorVersion: version,
		Capabilities:  caps,
	}, nil
}

func (p *plugin) InstanceExists(_ context.Context, req *cloudproviderv1.InstanceExistsRequest) (*cloudproviderv1.InstanceExistsResponse, error) {
	_, err := p.lookup(req.GetNode())
	if status.Code(err) == codes.NotFound {
		return &cloudproviderv1.InstanceExistsResponse{Exists: false}, nil
	}
	if err != nil {
		return nil, err
	}
	return &cloudproviderv1.InstanceExistsResponse{Exists: true}, nil
}

func (p *plugin) InstanceShutdown(_ context.Context, req *cloudproviderv1.InstanceShutdownRequest) (*cloudproviderv1.InstanceShutdownResponse, error) {
	nd, err := p.lookup(req.GetNode())
	if err != nil {
		return nil, err
	}
	return &cloudproviderv1.InstanceShutdownResponse{Shutdown: nd.Shutdown}, nil
}

func (p *plugin) InstanceMetadata(_ context.Context, req *cloudproviderv1.InstanceMetadataRequest) (*cloudproviderv1.InstanceMetadataResponse, error) {
	nd, err := p.lookup(req.GetNode())
	if err != nil {
		return nil, err
	}
	resp := &cloudproviderv1.InstanceMetadataResponse{
		ProviderId:       nd.ProviderID,
		InstanceType:     nd.InstanceType,
		Zone:             nd.Zone,
		Region:           nd.Region,
		AdditionalLabels: nd.Labels,
	}
	for i, a := range nd.Addresses {
		t, ok := addressTypes[a.Type]
		if !ok {
			return nil, status.Errorf(codes.Internal, "config: nodes.%s.addresses[%d].type %q is unknown", req.GetNode().GetName(), i, a.Type)
		}
		resp.NodeAddresses = append(resp.NodeAddresses, &cloudproviderv1.NodeAddress{Type: t, Address: a.Address})
	}
	return resp, nil
}

func main() {
	socket := flag.String("socket", "/run/microlet/cloudprovider.sock", "unix socket to serve on")
	cfg := flag.String("config", "instances.yaml", "YAML file describing the instances")
	flag.Parse()
	if err := run(*socket, *cfg); err != nil {
		fmt.Fprintln(os.Stderr, "cloudprovider-external:", err)
		os.Exit(1)
	}
}

func run(socket, cfg string) error {
	p := &plugin{path: cfg}
	p.lbs = &balancers{p: p, byUID: map[string]*balancer{}}
	p.rt = &routeTable{p: p, routes: map[string]*cloudproviderv1.Route{}}
	if _, err := p.load(); err != nil {
		return err
	}
	// A socket left by a dead predecessor is replaced; one a live process
	// still answers on is not.
	if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		_ = c.Close()
		return fmt.Errorf("%s is served by another process", socket)
	}
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	cloudproviderv1.RegisterIdentityServiceServer(srv, p)
	cloudproviderv1.RegisterInstancesServiceServer(srv, p)
	cloudproviderv1.RegisterLoadBalancerServiceServer(srv, p.lbs)
	cloudproviderv1.RegisterRoutesServiceServer(srv, p.rt)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		srv.GracefulStop()
	}()
	log.Printf("serving %s from %s", socket, cfg)
	return srv.Serve(lis)
}
