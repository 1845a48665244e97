package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/internal/config"
)

// Provider is the local cloud provider: cloudprovider.LoadBalancer and
// cloudprovider.InstancesV2 for one machine.
type Provider struct {
	pool    *pool
	udpIdle time.Duration
	log     *slog.Logger

	factory informers.SharedInformerFactory
	slices  discoverylisters.EndpointSliceLister
	synced  cache.InformerSynced
	stop    chan struct{}

	routes *Routes

	mu       sync.Mutex
	closed   bool
	byUID    map[types.UID]*balancer
	addrUser map[netip.Addr]types.UID
	// services are every Service, from the controllers' shared informers
	// (SetInformers), so a fresh address is never one another Service
	// still shows in its status (given by a previous leader, and not yet
	// claimed again by this one); nil until set.
	services       corelisters.ServiceLister
	servicesSynced cache.InformerSynced
}

var (
	_ cloudprovider.LoadBalancer = (*Provider)(nil)
	_ cloudprovider.InstancesV2  = (*Provider)(nil)
	_ cloudprovider.InformerUser = (*Provider)(nil)
)

// Routes is the provider's cloudprovider.Routes: kernel routes of this host.
func (p *Provider) Routes() *Routes { return p.routes }

// New checks the settings and starts watching EndpointSlices with cs.
// Errors name the config key at fault.
func New(s Settings, cs kubernetes.Interface, log *slog.Logger) (*Provider, error) {
	if cs == nil {
		return nil, errors.New("cloud_provider local: a kube client is needed to watch EndpointSlices")
	}
	pl, err := parsePool(s.Pool)
	if err != nil {
		return nil, err
	}
	idle := s.UDPIdleTimeout
	if idle == 0 {
		idle = DefaultUDPIdleTimeout
	}
	if err := config.Join(config.Positive(field.NewPath("local_udp_idle_timeout"), idle)); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	routes, err := NewRoutes(s, cs, nil, log)
	if err != nil {
		return nil, err
	}
	// Only slices that belong to a Service matter; the label is set by the
	// EndpointSlice controller and by anyone managing slices for a Service.
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = discoveryv1.LabelServiceName
	}))
	inf := f.Discovery().V1().EndpointSlices()
	p := &Provider{
		pool:     pl,
		udpIdle:  idle,
		log:      log,
		factory:  f,
		slices:   inf.Lister(),
		synced:   inf.Informer().HasSynced,
		stop:     make(chan struct{}),
		byUID:    map[types.UID]*balancer{},
		addrUser: map[netip.Addr]types.UID{},
		routes:   routes,
	}
	f.Start(p.stop)
	return p, nil
}

// Close stops the informer and closes every listener and connection.
func (p *Provider) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	bals := p.byUID
	p.byUID = map[types.UID]*balancer{}
	p.mu.Unlock()
	for _, b := range bals {
		b.closeAll()
	}
	close(p.stop)
	p.factory.Shutdown()
	p.routes.Close()
	return nil
}

// InstanceExists implements cloudprovider.InstancesV2: every Node's machine
// is this one, or one the provider knows nothing about; neither is gone.
func (p *Provider) InstanceExists(context.Context, *corev1.Node) (bool, error) { return true, nil }

// InstanceShutdown implements cloudprovider.InstancesV2: never shut down.
func (p *Provider) InstanceShutdown(context.Context, *corev1.Node) (bool, error) { return false, nil }

// InstanceMetadata implements cloudprovider.InstancesV2: a provider ID and
// nothing else, so the Node keeps its own addresses and labels.
func (p *Provider) InstanceMetadata(_ context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	if node == nil {
		return nil, errors.New("node is nil")
	}
	id := node.Spec.ProviderID
	if id == "" {
		id = Name + "://" + node.Name
	}
	return &cloudprovider.InstanceMetadata{ProviderID: id}, nil
}

// GetLoadBalancerName implements cloudprovider.LoadBalancer.
func (p *Provider) GetLoadBalancerName(_ context.Context, _ string, svc *corev1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(svc)
}

// GetLoadBalancer implements cloudprovider.LoadBalancer.
func (p *Provider) GetLoadBalancer(_ context.Context, _ string, svc *corev1.Service) (*corev1.LoadBalancerStatus, bool, error) {
	if svc == nil {
		return nil, false, errors.New("service is nil")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.byUID[svc.UID]
	if !ok {
		return nil, false, nil
	}
	return b.status(), true, nil
}

// EnsureLoadBalancer implements cloudprovider.LoadBalancer: the Service gets
// its address and one listener per port. Nodes are not used: traffic goes to
// the endpoints directly.
func (p *Provider) EnsureLoadBalancer(ctx context.Context, _ string, svc *corev1.Service, _ []*corev1.Node) (*corev1.LoadBalancerStatus, error) {
	if svc == nil {
		return nil, errors.New("service is nil")
	}
	ports, err := wantedPorts(svc)
	if err != nil {
		return nil, err
	}
	synced := []cache.InformerSynced{p.synced}
	p.mu.Lock()
	if p.servicesSynced != nil {
		synced = append(synced, p.servicesSynced)
	}
	p.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("%s/%s: EndpointSlices and Services not synced yet: %w", svc.Namespace, svc.Name, ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("local provider closed")
	}
	want, err := p.pickAddr(svc)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", svc.Namespace, svc.Name, err)
	}
	b := p.byUID[svc.UID]
	if b != nil && b.addr != want {
		p.log.Info("local load balancer: moving to another address", "service", b.key(), "from", b.addr, "to", want)
		p.release(b)
		b = nil
	}
	if b == nil {
		b = &balancer{p: p, uid: svc.UID, addr: want, listeners: map[portKey]*listener{}}
		p.byUID[svc.UID] = b
		p.addrUser[want] = svc.UID
	}
	b.namespace, b.name = svc.Namespace, svc.Name
	if err := b.sync(ports); err != nil {
		return nil, fmt.Errorf("%s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return b.status(), nil
}

// UpdateLoadBalancer implements cloudprovider.LoadBalancer: the node set
// does not matter to a balancer that sends to the endpoints.
func (p *Provider) UpdateLoadBalancer(context.Context, string, *corev1.Service, []*corev1.Node) error {
	return nil
}

// EnsureLoadBalancerDeleted implements cloudprovider.LoadBalancer.
func (p *Provider) EnsureLoadBalancerDeleted(_ context.Context, _ string, svc *corev1.Service) error {
	if svc == nil {
		return errors.New("service is nil")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if b, ok := p.byUID[svc.UID]; ok {
		p.release(b)
		p.log.Info("local load balancer deleted", "service", b.key(), "address", b.addr)
	}
	return nil
}

// release closes b and frees its address; p.mu is held.
func (p *Provider) release(b *balancer) {
	b.closeAll()
	delete(p.byUID, b.uid)
	if p.addrUser[b.addr] == b.uid {
		delete(p.addrUser, b.addr)
	}
}

// pickAddr chooses svc's address: spec.loadBalancerIP when set (it must be
// in the pool and not another Service's), else the one it has, else the one
// its status shows when free, else the first free one that no other Service
// shows in its status (a new leader, or a restarted cloudsyncd, then gives
// each Service back its address whatever order it ensures them in). p.mu
// is held.
func (p *Provider) pickAddr(svc *corev1.Service) (netip.Addr, error) {
	free := func(a netip.Addr) bool {
		u, used := p.addrUser[a]
		return !used || u == svc.UID
	}
	shown := p.shownByOthers(svc.UID)
	if s := svc.Spec.LoadBalancerIP; s != "" { //nolint:staticcheck // deprecated in the API, still the way to ask for an address
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %q: not an IP address", s)
		}
		if !p.pool.contains(a) {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %s: not in local_lb_pool %v", a, p.pool.prefixes)
		}
		if !free(a) {
			return netip.Addr{}, fmt.Errorf("spec.loadBalancerIP %s: already the address of another Service", a)
		}
		return a, nil
	}
	if b, ok := p.byUID[svc.UID]; ok {
		return b.addr, nil
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil && p.pool.contains(a) && free(a) {
			return a, nil
		}
	}
	var got netip.Addr
	p.pool.each(func(a netip.Addr) bool {
		if free(a) && !shown[a] {
			got = a
			return false
		}
		return true
	})
	if !got.IsValid() {
		return netip.Addr{}, fmt.Errorf("local_lb_pool %v: no free address left", p.pool.prefixes)
	}
	return got, nil
}

// SetInformers implements cloudprovider.InformerUser: the Services come
// from the controllers' shared informer factory, which the service
// controller watches anyway, so the provider opens no watch of its own.
// The factory is started by its owner after this call; a new leadership
// term brings a new factory.
func (p *Provider) SetInformers(f informers.SharedInformerFactory) {
	inf := f.Core().V1().Services()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.services, p.servicesSynced = inf.Lister(), inf.Informer().HasSynced
}

// shownByOthers is the set of addresses other Services (not uid) show in
// their load balancer status; none before SetInformers. p.mu is held.
func (p *Provider) shownByOthers(uid types.UID) map[netip.Addr]bool {
	if p.services == nil {
		return nil
	}
	svcs, err := p.services.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := map[netip.Addr]bool{}
	for _, s := range svcs {
		if s.UID == uid {
			continue
		}
		for _, ing := range s.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(ing.IP); err == nil {
				out[a] = true
			}
		}
	}
	return out
}

// wantedPorts lists the listeners svc needs.
func wantedPorts(svc *corev1.Service) (map[portKey]string, error) {
	out := make(map[portKey]string, len(svc.Spec.Ports))
	for i, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP {
			return nil, fmt.Errorf("%s/%s: spec.ports[%d] protocol %s: the local provider forwards TCP and UDP only", svc.Namespace, svc.Name, i, proto)
		}
		out[portKey{proto: proto, port: sp.Port}] = sp.Name
	}
	return out, nil
}
