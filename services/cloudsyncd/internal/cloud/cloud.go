package cloud

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/external"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/local"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/metadata"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/registered"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/static"
)

// Config is the provider part of cloudsyncd's configuration; each field is
// named after the config key it comes from.
type Config struct {
	// Provider is cloud_provider: static, metadata, external, local or a
	// registered name. Empty is an error here: the controllers need a cloud.
	Provider string
	// CloudConfig is cloud_config, the config file of a registered provider.
	CloudConfig string
	// NodeName is node_name, the node cloudsyncd runs on (metadata answers for it only).
	NodeName string
	// StaticFile is static_file.
	StaticFile string
	// MetadataEndpoint, MetadataTokenTTL and MetadataRequestTimeout are
	// metadata_endpoint, metadata_token_ttl and metadata_request_timeout.
	MetadataEndpoint       string
	MetadataTokenTTL       time.Duration
	MetadataRequestTimeout time.Duration
	// ExternalEndpoint is external_endpoint.
	ExternalEndpoint string
	// Local are the local_* keys.
	Local local.Settings
}

// Cloud is a cloudprovider.Interface holding resources (file watches,
// connections, informers, listeners) until Close.
type Cloud interface {
	cloudprovider.Interface
	// Close releases what the provider holds; the Cloud is unusable afterwards.
	Close() error
}

// Option is an optional setting of New.
type Option func(*options)

type options struct {
	log  *slog.Logger
	kube kubernetes.Interface
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(log *slog.Logger) Option { return func(o *options) { o.log = log } }

// WithKubeClient gives the provider a client of the API server. The local
// provider needs it to watch EndpointSlices; the others ignore it.
func WithKubeClient(cs kubernetes.Interface) Option { return func(o *options) { o.kube = cs } }

// New builds the provider cfg.Provider names. Errors name the config key at
// fault, on one line, so the caller can exit with them.
func New(cfg Config, opts ...Option) (Cloud, error) {
	o := options{log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	switch cfg.Provider {
	case "":
		return nil, errors.New("cloud_provider: required by the controllers (static, metadata, external, local or a registered provider)")
	case static.Name:
		if cfg.StaticFile == "" {
			return nil, errors.New("static_file: required when cloud_provider is static")
		}
		return newStatic(cfg.StaticFile, o.log)
	case metadata.Name:
		p, err := metadata.New(cfg.MetadataEndpoint,
			metadata.WithTokenTTL(cfg.MetadataTokenTTL),
			metadata.WithRequestTimeout(cfg.MetadataRequestTimeout))
		if err != nil {
			return nil, err
		}
		return newOwnNode(p, cfg.NodeName), nil
	case external.Name:
		if cfg.ExternalEndpoint == "" {
			return nil, errors.New("external_endpoint: required when cloud_provider is external")
		}
		c, err := external.Dial(cfg.ExternalEndpoint, o.log)
		if err != nil {
			return nil, err
		}
		return &externalCloud{base: base{name: external.Name}, c: c}, nil
	case local.Name:
		if o.kube == nil {
			return nil, errors.New("cloud_provider local: needs a kubeconfig (kubeconfig or cloud_kubeconfig) to watch EndpointSlices")
		}
		p, err := local.New(cfg.Local, o.kube, o.log)
		if err != nil {
			return nil, err
		}
		return &localCloud{base: base{name: local.Name}, p: p}, nil
	default:
		c, err := registered.Get(cfg.Provider, cfg.CloudConfig)
		if err != nil {
			return nil, err
		}
		return registeredCloud{c}, nil
	}
}

// base answers "not supported" for every part; the providers override what they have.
type base struct{ name string }

// Initialize implements cloudprovider.Interface: the built-in providers need
// no client builder.
func (base) Initialize(cloudprovider.ControllerClientBuilder, <-chan struct{}) {}

// LoadBalancer implements cloudprovider.Interface.
func (base) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return nil, false }

// Instances implements cloudprovider.Interface: the built-in providers serve InstancesV2.
func (base) Instances() (cloudprovider.Instances, bool) { return nil, false }

// InstancesV2 implements cloudprovider.Interface.
func (base) InstancesV2() (cloudprovider.InstancesV2, bool) { return nil, false }

// Zones implements cloudprovider.Interface: InstancesV2 carries the zone.
func (base) Zones() (cloudprovider.Zones, bool) { return nil, false }

// Clusters implements cloudprovider.Interface.
func (base) Clusters() (cloudprovider.Clusters, bool) { return nil, false }

// Routes implements cloudprovider.Interface.
func (base) Routes() (cloudprovider.Routes, bool) { return nil, false }

// ProviderName implements cloudprovider.Interface.
func (b base) ProviderName() string { return b.name }

// HasClusterID implements cloudprovider.Interface: the built-in providers
// keep nothing shared between clusters that a cluster ID would tell apart.
func (base) HasClusterID() bool { return true }

// registeredCloud passes a registered provider through.
type registeredCloud struct{ cloudprovider.Interface }

// Close implements Cloud; cloud providers have no close.
func (registeredCloud) Close() error { return nil }

// externalCloud serves a plug-in.
type externalCloud struct {
	base
	c *external.Client
}

// InstancesV2 implements cloudprovider.Interface.
func (e *externalCloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return e.c, true }

// LoadBalancer implements cloudprovider.Interface when the plug-in has the capability.
func (e *externalCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) {
	if e.c.HasCapability(external.CapabilityLoadBalancer) {
		return e.c, true
	}
	return nil, false
}

// Routes implements cloudprovider.Interface when the plug-in has the capability.
func (e *externalCloud) Routes() (cloudprovider.Routes, bool) {
	if e.c.HasCapability(external.CapabilityRoutes) {
		return e.c, true
	}
	return nil, false
}

// Close implements Cloud.
func (e *externalCloud) Close() error { return e.c.Close() }

// localCloud serves the local provider.
type localCloud struct {
	base
	p *local.Provider
}

// InstancesV2 implements cloudprovider.Interface.
func (l *localCloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return l.p, true }

// LoadBalancer implements cloudprovider.Interface.
func (l *localCloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return l.p, true }

// Routes implements cloudprovider.Interface: kernel routes of this host.
func (l *localCloud) Routes() (cloudprovider.Routes, bool) { return l.p.Routes(), true }

// Close implements Cloud.
func (l *localCloud) Close() error { return l.p.Close() }

var _ cloudprovider.InformerUser = (*localCloud)(nil)

// SetInformers implements cloudprovider.InformerUser: the provider reads
// Services from the controllers' shared informers.
func (l *localCloud) SetInformers(f informers.SharedInformerFactory) { l.p.SetInformers(f) }

var errNoNode = fmt.Errorf("node is nil")
