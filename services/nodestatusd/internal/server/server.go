package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/evictionapi"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/version"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	"github.com/microlet/microlet/services/nodestatusd/internal/agent"
	"github.com/microlet/microlet/services/nodestatusd/internal/host"
	"github.com/microlet/microlet/services/nodestatusd/internal/nodelease"
	"github.com/microlet/microlet/services/nodestatusd/internal/registration"
	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
)

// Config is nodestatusd's configuration; defaults are the kubelet's.
type Config struct {
	service.Common `yaml:",inline"`

	HostnameOverride    string            `yaml:"hostname_override" flag:"hostname-override" usage:"kubernetes.io/hostname label and Hostname address (default: the node name)"`
	NodeIP              string            `yaml:"node_ip" flag:"node-ip" usage:"node IP address(es), comma-separated for dual-stack; default: the cloud's, else detected"`
	NodeLabels          map[string]string `yaml:"node_labels" flag:"node-labels" usage:"labels to register the node with (override the defaults)"`
	RegisterWithTaints  []string          `yaml:"register_with_taints" flag:"register-with-taints" usage:"taints to register the node with, key[=value]:Effect"`
	RegisterSchedulable bool              `yaml:"register_schedulable" flag:"register-schedulable" usage:"register the node schedulable; false adds the unschedulable taint"`
	CloudProvider       string            `yaml:"cloud_provider" flag:"cloud-provider" usage:"\"external\" registers with the uninitialized taint for a cloud controller"`

	NodeStatusUpdateFrequency time.Duration `yaml:"node_status_update_frequency" flag:"node-status-update-frequency" usage:"how often the status is computed"`
	NodeStatusReportFrequency time.Duration `yaml:"node_status_report_frequency" flag:"node-status-report-frequency" usage:"how often an unchanged status is still reported"`
	NodeLeaseDurationSeconds  int32         `yaml:"node_lease_duration_seconds" flag:"node-lease-duration-seconds" usage:"duration of the node Lease"`
	NodeLeaseRenewInterval    time.Duration `yaml:"node_lease_renew_interval" flag:"node-lease-renew-interval" usage:"Lease renew interval (default: a quarter of the duration)"`
	FastStatusTimeout         time.Duration `yaml:"fast_status_timeout" flag:"fast-status-timeout" usage:"how long the startup loop reports Ready early"`

	MaxPods             int64             `yaml:"max_pods" flag:"max-pods" usage:"pods capacity"`
	NodeStatusMaxImages int               `yaml:"node_status_max_images" flag:"node-status-max-images" usage:"at most this many images in the status (-1: no cap)"`
	KubeReserved        map[string]string `yaml:"kube_reserved" flag:"kube-reserved" usage:"resources reserved for node daemons, e.g. cpu=100m,memory=256Mi"`
	SystemReserved      map[string]string `yaml:"system_reserved" flag:"system-reserved" usage:"resources reserved for the OS"`
	EvictionHard        map[string]string `yaml:"eviction_hard" flag:"eviction-hard" usage:"hard eviction thresholds, subtracted from allocatable (unset: the kubelet's defaults); give podsyncd, which judges pressure, the same"`
	NodeFsPath          string            `yaml:"nodefs_path" flag:"nodefs-path" usage:"filesystem measured for nodefs (ephemeral-storage)"`
	ImageFsPath         string            `yaml:"imagefs_path" flag:"imagefs-path" usage:"filesystem measured for imagefs (default: nodefs)"`
	DaemonPort          int32             `yaml:"daemon_port" flag:"daemon-port" usage:"kubelet API port advertised in the status while nodeapi does not answer (when it does, the port it really serves)"`
	KubeAPIQPS          float32           `yaml:"kube_api_qps" flag:"kube-api-qps" usage:"QPS of the registration client (heartbeats are never throttled)"`
	KubeAPIBurst        int               `yaml:"kube_api_burst" flag:"kube-api-burst" usage:"burst of the registration client"`
}

// DefaultConfig is the kubelet's defaults.
func DefaultConfig() Config {
	t := agent.DefaultTiming()
	return Config{
		Common:                    service.DefaultCommon(),
		RegisterSchedulable:       true,
		NodeStatusUpdateFrequency: t.StatusUpdateFrequency,
		NodeStatusReportFrequency: t.StatusReportFrequency,
		NodeLeaseDurationSeconds:  t.LeaseDurationSeconds,
		FastStatusTimeout:         t.FastStatusTimeout,
		MaxPods:                   setters.DefaultMaxPods,
		NodeStatusMaxImages:       setters.DefaultMaxImages,
		NodeFsPath:                "/",
		DaemonPort:                setters.DefaultDaemonPort,
		KubeAPIQPS:                50,
		KubeAPIBurst:              100,
	}
}

// Nodes is which Nodes a Server keeps: nodestatusd's is the node it runs
// on; nodestatussim (package simulate) hands NewFor many made-up ones.
type Nodes interface {
	// Validate checks the settings these nodes depend on; it runs first in
	// Register.
	Validate() error
	// Share completes what their agents share: how many there are, which
	// Nodes the informer watches and which inputs the nodes have.
	Share(sc *agent.SharedConfig)
	// Agents returns the agents on sh, each registering like reg.
	Agents(sh *agent.Shared, reg registration.Options) []*agent.Agent
}

// thisNode is nodestatusd's Nodes: the one named node_name.
type thisNode struct{ cfg *Config }

func (n thisNode) Validate() error { return registration.ValidateNodeName(n.cfg.NodeName) }

func (n thisNode) Share(sc *agent.SharedConfig) { sc.Nodes, sc.NodeName = 1, n.cfg.NodeName }

func (n thisNode) Agents(sh *agent.Shared, reg registration.Options) []*agent.Agent {
	return []*agent.Agent{agent.New(n.cfg.NodeName, sh, reg)}
}

// Server is the nodestatusd service.
type Server struct {
	cfg   *Config
	nodes Nodes

	// built by Register
	reg      registration.Options
	nodeIPs  []net.IP
	inputs   setters.Inputs
	timing   agent.Timing
	extra    *setters.Conditions
	ready    *setters.ReadyErrors
	api      *api
	clock    clock.WithTicker
	restCfg  *rest.Config
	runtime  *sources.Runtime
	cloud    *sources.Cloud
	statsTTL *statsCache
}

// New returns the service with its defaults, keeping the node it runs on.
func New() *Server {
	cfg := DefaultConfig()
	return NewFor(&cfg, thisNode{&cfg})
}

// NewFor returns the service keeping nodes, configured by cfg: the caller's
// config embeds it, and Config returns cfg only (nodestatussim serves its
// own, larger one).
func NewFor(cfg *Config, nodes Nodes) *Server {
	return &Server{cfg: cfg, nodes: nodes, clock: clock.RealClock{}}
}

// Name implements service.Service.
func (s *Server) Name() string { return components.NodeStatusd }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return s.cfg }

// Register implements service.Service: it checks every setting, so a bad
// node name, label, taint or threshold stops startup with one line.
func (s *Server) Register(env *service.Env) error {
	if err := s.validate(); err != nil {
		return err
	}
	s.api = newAPI(env.Log)
	s.extra = setters.NewConditions(s.api.pokeAll)
	nodestatusv1.RegisterNodeStatusServiceServer(env.Server.GRPC(), s.api)
	s.api.extra = s.extra
	s.ready = setters.NewReadyErrors(s.api.pokeAll)
	s.api.readyErrs = s.ready
	return nil
}

func (s *Server) validate() error {
	c := s.cfg
	if err := s.nodes.Validate(); err != nil {
		return err
	}
	if err := registration.ValidateLabels(c.NodeLabels); err != nil {
		return err
	}
	taints, err := registration.ParseTaints(c.RegisterWithTaints)
	if err != nil {
		return err
	}
	switch c.CloudProvider {
	case "", "external":
	default:
		return fmt.Errorf("cloud_provider %q: want \"\" or \"external\" (cloud providers run in cloudsyncd)", c.CloudProvider)
	}
	// The kubelet's parser: one address, or a dual-stack pair (one IPv4,
	// one IPv6). Unlike the kubelet, which logs and ignores them, an
	// unparsable or unspecified address is refused by name.
	ips, invalid, err := nodeutil.ParseNodeIPArgument(c.NodeIP, c.CloudProvider)
	if err != nil {
		return fmt.Errorf("node_ip %q: %w", c.NodeIP, err)
	}
	if len(invalid) > 0 {
		return fmt.Errorf("node_ip %q: not an IP address: %q", c.NodeIP, invalid)
	}
	for _, ip := range ips {
		if ip.IsUnspecified() {
			return fmt.Errorf("node_ip %q: %s is not a node address", c.NodeIP, ip)
		}
	}
	s.nodeIPs = ips
	errs := config.Positive(field.NewPath("node_status_update_frequency"), c.NodeStatusUpdateFrequency)
	errs = append(errs, config.Positive(field.NewPath("node_status_report_frequency"), c.NodeStatusReportFrequency)...)
	errs = append(errs, config.Positive(field.NewPath("fast_status_timeout"), c.FastStatusTimeout)...)
	errs = append(errs, config.Positive(field.NewPath("node_lease_duration_seconds"), c.NodeLeaseDurationSeconds)...)
	errs = append(errs, config.Positive(field.NewPath("max_pods"), c.MaxPods)...)
	errs = append(errs, config.Positive(field.NewPath("kube_api_qps"), c.KubeAPIQPS)...)
	errs = append(errs, config.Positive(field.NewPath("kube_api_burst"), c.KubeAPIBurst)...)
	if err := config.Join(errs); err != nil {
		return err
	}
	if c.NodeLeaseRenewInterval < 0 || c.NodeLeaseRenewInterval >= time.Duration(c.NodeLeaseDurationSeconds)*time.Second {
		return fmt.Errorf("node_lease_renew_interval: %s: must be shorter than the lease duration", c.NodeLeaseRenewInterval)
	}
	hard := c.EvictionHard
	if hard == nil {
		hard = evictionapi.DefaultEvictionHard
	}
	th, err := evictionapi.Parse(evictionapi.Config{Hard: hard})
	if err != nil {
		return err
	}
	reserved, err := setters.ParseReserved(c.KubeReserved, c.SystemReserved)
	if err != nil {
		return fmt.Errorf("kube_reserved/system_reserved: %w", err)
	}
	s.reg = registration.Options{
		NodeName:              c.NodeName,
		Hostname:              c.HostnameOverride,
		Labels:                c.NodeLabels,
		Taints:                taints,
		Unschedulable:         !c.RegisterSchedulable,
		ExternalCloudProvider: c.CloudProvider == "external",
		MicroletVersion:       version.Version,
		DeclaredFeatures:      setters.NodeFeatures(version.Kubernetes),
	}
	s.timing = agent.Timing{
		StatusUpdateFrequency: c.NodeStatusUpdateFrequency,
		StatusReportFrequency: c.NodeStatusReportFrequency,
		LeaseDurationSeconds:  c.NodeLeaseDurationSeconds,
		LeaseRenewInterval:    c.NodeLeaseRenewInterval,
		FastStatusTimeout:     c.FastStatusTimeout,
	}
	if s.timing.LeaseRenewInterval == 0 {
		s.timing.LeaseRenewInterval = nodelease.RenewInterval(c.NodeLeaseDurationSeconds)
	}
	s.inputs = setters.Inputs{
		NodeIPs:      s.nodeIPs,
		EvictionHard: th,
		Reserved:     reserved,
		MaxPods:      c.MaxPods,
		MaxImages:    c.NodeStatusMaxImages,
		DaemonPort:   c.DaemonPort,
		Version:      version.Kubernetes,
	}
	rc, err := kubeclient.Config(c.Kubeconfig, components.NodeStatusd, c.KubeAPIQPS, c.KubeAPIBurst)
	switch {
	case errors.Is(err, kubeclient.ErrStandalone): // restCfg stays nil
	case err != nil:
		return err
	default:
		s.restCfg = rc
	}
	return nil
}

// Run implements service.Service.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	h := host.New()
	facts, err := h.Facts()
	if err != nil {
		return fmt.Errorf("host facts: %w", err)
	}
	// Readings are shared by every sync (and every node of the process) but kept
	// short, so the startup loop sees the runtime turn ready within a second.
	maxAge := min(s.cfg.NodeStatusUpdateFrequency/2, time.Second)
	s.runtime = sources.NewRuntime(env.Common.Endpoint(components.RuntimeShim), env.Common.ImageServiceEndpoint(), maxAge)
	defer s.runtime.Close()
	s.cloud = sources.NewCloud(env.Common.Endpoint(components.CloudSyncd), maxAge)
	defer s.cloud.Close()
	kubeletAPI := sources.NewNodeAPI(env.Common.Endpoint(components.NodeAPI), maxAge)
	defer kubeletAPI.Close()
	podSync := sources.NewPodSync(env.Common.Endpoint(components.PodSyncd), maxAge)
	defer podSync.Close()
	s.statsTTL = newStatsCache(h, s.cfg.NodeFsPath, s.cfg.ImageFsPath, time.Second)

	in := s.inputs
	in.Facts = facts
	in.Stats = s.statsTTL.get
	in.Runtime = s.runtime.Get
	in.RuntimeEndpoint = s.runtime.Endpoint()
	in.PodCIDR = s.runtime.UpdatePodCIDR
	in.Cloud = s.cloud.Get
	in.KubeletAPI = kubeletAPI.Get
	in.Pressure = setters.NewPressure(podSync.Get)
	devices := sources.NewDevices(env.Common.Endpoint(components.PodSyncd), maxAge)
	defer devices.Close()
	in.Devices = setters.NewDevices(devices.Get)
	in.Extra = s.extra
	in.ReadyErrors = s.ready
	in.Machine = &setters.MachineCache{}

	sc := agent.SharedConfig{
		RestConfig: s.restCfg,
		QPS:        s.cfg.KubeAPIQPS,
		Burst:      s.cfg.KubeAPIBurst,
		Timing:     s.timing,
		Clock:      s.clock,
		Log:        env.Log,
		Inputs:     in,
	}
	s.nodes.Share(&sc)
	sh, err := agent.NewShared(ctx, sc)
	if err != nil {
		return err
	}
	if sh.Standalone() {
		env.Log.Info("standalone: no kubeconfig; the Node is computed and served over gRPC only")
	}
	agents := s.nodes.Agents(sh, s.reg)
	runner := agent.NewRunner(agents)
	s.api.setAgents(agents)
	registerMetrics(env.Registry, agents)
	env.Ready()
	return runner.Run(ctx)
}

// NodeFromBytes decodes a Node sent over the API (CLI and tests).
func NodeFromBytes(b []byte) (*corev1.Node, error) {
	n := &corev1.Node{}
	if err := n.Unmarshal(b); err != nil {
		return nil, err
	}
	return n, nil
}
