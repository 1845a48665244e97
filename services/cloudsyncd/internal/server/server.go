package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/service"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
	"github.com/microlet/microlet/services/cloudsyncd/internal/cloud"
	"github.com/microlet/microlet/services/cloudsyncd/internal/controllers"
	"github.com/microlet/microlet/services/cloudsyncd/internal/nodeinit"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/external"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/local"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/metadata"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/registered"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/static"
	"github.com/microlet/microlet/services/cloudsyncd/internal/syncmanager"
)

// Config is cloudsyncd's configuration. Every key is also a flag.
type Config struct {
	service.Common `yaml:",inline"`

	CloudProvider   string        `yaml:"cloud_provider" flag:"cloud-provider" usage:"static, metadata, external, local, or a provider registered with k8s.io/cloud-provider; empty: none, calls answer FailedPrecondition"`
	CloudConfig     string        `yaml:"cloud_config" flag:"cloud-config" usage:"config file handed to a registered k8s.io/cloud-provider provider"`
	SyncFrequency   time.Duration `yaml:"sync_frequency" flag:"sync-frequency" usage:"how often the provider is asked for the node's addresses"`
	ProviderTimeout time.Duration `yaml:"provider_timeout" flag:"provider-timeout" usage:"bound on each call to the provider"`

	StaticFile string `yaml:"static_file" flag:"static-file" usage:"static provider: YAML file with the node's addresses and metadata, re-read on change"`

	MetadataEndpoint       string        `yaml:"metadata_endpoint" flag:"metadata-endpoint" usage:"metadata provider: base URL of the EC2-style (IMDSv2) metadata service"`
	MetadataTokenTTL       time.Duration `yaml:"metadata_token_ttl" flag:"metadata-token-ttl" usage:"metadata provider: TTL asked for each IMDSv2 token (1s to 6h)"`
	MetadataRequestTimeout time.Duration `yaml:"metadata_request_timeout" flag:"metadata-request-timeout" usage:"metadata provider: timeout of each HTTP request"`

	ExternalEndpoint string `yaml:"external_endpoint" flag:"external-endpoint" usage:"external provider: unix socket of a microlet.cloudprovider.v1 plug-in"`

	// local.Settings are the local provider's keys (local_lb_pool, ...).
	local.Settings `yaml:",inline"`

	NodeInit        bool   `yaml:"node_init" flag:"node-init" usage:"initialise this Node from the provider while it has the uninitialized taint, and keep the shutdown taint in step"`
	CloudKubeconfig string `yaml:"cloud_kubeconfig" flag:"cloud-kubeconfig" usage:"kubeconfig of a credential allowed to change Node taints, for node_init and the controllers (default: kubeconfig)"`

	ControllerConfig `yaml:",inline"`
}

// Server is the cloudsyncd service.
type Server struct {
	cfg     Config
	mgr     *syncmanager.Manager // nil when no provider is configured
	handler *handler

	// Controller mode (controllers set): the cluster-wide cloud and the
	// controllers driving it; mgr is nil then.
	cloud cloud.Cloud
	ctl   *controllers.Manager
}

// New returns the service with its defaults.
func New() *Server {
	return &Server{cfg: Config{
		Common:                 service.DefaultCommon(),
		SyncFrequency:          syncmanager.DefaultSyncFrequency,
		ProviderTimeout:        syncmanager.DefaultProviderTimeout,
		MetadataEndpoint:       metadata.DefaultEndpoint,
		MetadataTokenTTL:       metadata.DefaultTokenTTL,
		MetadataRequestTimeout: metadata.DefaultRequestTimeout,
		NodeInit:               true,
		ControllerConfig:       defaultControllerConfig(),
	}}
}

// Name implements service.Service.
func (s *Server) Name() string { return components.CloudSyncd }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return &s.cfg }

// Register implements service.Service: it checks the config, builds the
// provider and registers the API. Its errors become one-line exits with code 2.
func (s *Server) Register(env *service.Env) error {
	c := &s.cfg
	errs := config.Positive(field.NewPath("sync_frequency"), c.SyncFrequency)
	errs = append(errs, config.Positive(field.NewPath("provider_timeout"), c.ProviderTimeout)...)
	if err := config.Join(errs); err != nil {
		return err
	}
	if len(c.Controllers) > 0 {
		// One mode per process: see registerControllers.
		if err := s.registerControllers(env); err != nil {
			return err
		}
		s.handler = &handler{unavailable: errControllerMode}
		cloudsyncv1.RegisterCloudSyncServiceServer(env.Server.GRPC(), s.handler)
		return nil
	}
	p, err := s.buildProvider(env)
	if err != nil {
		return err
	}
	if p != nil {
		s.mgr = syncmanager.New(p,
			syncmanager.WithSyncFrequency(c.SyncFrequency),
			syncmanager.WithProviderTimeout(c.ProviderTimeout),
			syncmanager.WithLogger(env.Log),
			syncmanager.WithRegistry(env.Registry))
	}
	s.handler = &handler{mgr: s.mgr, unavailable: errNoProvider}
	cloudsyncv1.RegisterCloudSyncServiceServer(env.Server.GRPC(), s.handler)
	return nil
}

func (s *Server) buildProvider(env *service.Env) (provider.Provider, error) {
	c := &s.cfg
	switch c.CloudProvider {
	case "":
		env.Log.Info("no cloud provider configured: calls answer FailedPrecondition")
		return nil, nil
	case static.Name:
		if c.StaticFile == "" {
			return nil, errors.New("static_file: required when cloud_provider is static")
		}
		return static.New(c.StaticFile, env.Log, static.WithNodeName(c.NodeName))
	case metadata.Name:
		return metadata.New(c.MetadataEndpoint,
			metadata.WithTokenTTL(c.MetadataTokenTTL),
			metadata.WithRequestTimeout(c.MetadataRequestTimeout))
	case external.Name:
		if c.ExternalEndpoint == "" {
			return nil, errors.New("external_endpoint: required when cloud_provider is external")
		}
		return external.New(c.ExternalEndpoint, c.NodeName, env.Log)
	case local.Name:
		// This machine is no cloud: the node's own addresses are the truth.
		env.Log.Info("cloud provider local: it serves the controllers' load balancers; node addresses come from the node itself")
		return nil, nil
	default:
		return registered.New(c.CloudProvider, c.CloudConfig, c.NodeName)
	}
}

// Run implements service.Service.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	if s.ctl != nil {
		return s.runControllers(ctx, env)
	}
	if s.mgr == nil {
		env.Ready()
		<-ctx.Done()
		return nil
	}
	defer s.mgr.Provider().Close()
	done := make(chan struct{})
	go func() { defer close(done); s.mgr.Run(ctx) }()
	// Ready at once: GetNodeAddresses itself waits for the first answer, up
	// to the caller's deadline, which is what callers want to control.
	env.Ready()
	if s.cfg.NodeInit {
		s.startNodeInit(ctx, env)
	}
	<-ctx.Done()
	<-done
	return nil
}

func (s *Server) startNodeInit(ctx context.Context, env *service.Env) {
	kc := s.cfg.CloudKubeconfig
	if kc == "" {
		kc = s.cfg.Kubeconfig
	}
	cs, _, err := kubeclient.Clientset(kc, "cloudsyncd", 5, 10)
	if errors.Is(err, kubeclient.ErrStandalone) {
		env.Log.Info("cloud node initialisation off: no kubeconfig or cloud_kubeconfig")
		return
	}
	if err != nil {
		env.Log.Error("cloud node initialisation off: cannot load the kubeconfig", "cloud_kubeconfig", kc, "err", err)
		return
	}
	ctrl := nodeinit.New(cs, s.cfg.NodeName, s.mgr,
		nodeinit.WithLogger(env.Log),
		nodeinit.WithPeriod(s.cfg.SyncFrequency))
	go ctrl.Run(ctx)
}

// handler serves CloudSyncService.
type handler struct {
	cloudsyncv1.UnimplementedCloudSyncServiceServer
	mgr         *syncmanager.Manager
	unavailable error // the answer when mgr is nil
}

var _ cloudsyncv1.CloudSyncServiceServer = (*handler)(nil)

var errNoProvider = status.Error(codes.FailedPrecondition, "no cloud provider configured (cloud_provider is empty): use the node's own addresses")

func encode(addrs []corev1.NodeAddress) ([][]byte, error) {
	out := make([][]byte, 0, len(addrs))
	for i := range addrs {
		b, err := addrs[i].Marshal()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "encode address: %v", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// toStatus turns a provider failure into Unavailable with the provider's
// reason: the dependency is down, the caller may retry.
func toStatus(err error) error {
	return status.Error(codes.Unavailable, err.Error())
}

// GetNodeAddresses implements CloudSyncService.
func (h *handler) GetNodeAddresses(ctx context.Context, _ *cloudsyncv1.GetNodeAddressesRequest) (*cloudsyncv1.GetNodeAddressesResponse, error) {
	if h.mgr == nil {
		return nil, h.unavailable
	}
	addrs, err := h.mgr.NodeAddresses(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	b, err := encode(addrs)
	if err != nil {
		return nil, err
	}
	return &cloudsyncv1.GetNodeAddressesResponse{Addresses: b}, nil
}

// WatchNodeAddresses implements CloudSyncService.
func (h *handler) WatchNodeAddresses(_ *cloudsyncv1.WatchNodeAddressesRequest, stream cloudsyncv1.CloudSyncService_WatchNodeAddressesServer) error {
	if h.mgr == nil {
		return h.unavailable
	}
	err := h.mgr.Watch(stream.Context(), func(addrs []corev1.NodeAddress) error {
		b, err := encode(addrs)
		if err != nil {
			return err
		}
		return stream.Send(&cloudsyncv1.WatchNodeAddressesResponse{Addresses: b})
	})
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return err
}

// GetInstanceMetadata implements CloudSyncService.
func (h *handler) GetInstanceMetadata(ctx context.Context, _ *cloudsyncv1.GetInstanceMetadataRequest) (*cloudsyncv1.GetInstanceMetadataResponse, error) {
	if h.mgr == nil {
		return nil, h.unavailable
	}
	md, err := h.mgr.InstanceMetadata(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	down, err := h.mgr.InstanceShutdown(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &cloudsyncv1.GetInstanceMetadataResponse{
		ProviderId:       md.ProviderID,
		InstanceType:     md.InstanceType,
		Zone:             md.Zone,
		Region:           md.Region,
		AdditionalLabels: md.AdditionalLabels,
		Shutdown:         down,
	}, nil
}
