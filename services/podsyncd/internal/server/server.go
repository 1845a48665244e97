package server

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	ocgroups "github.com/opencontainers/cgroups"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	criapi "k8s.io/cri-api/pkg/apis"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/criclient"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/promwire"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/stats"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
	"github.com/microlet/microlet/services/podsyncd/internal/containergc"
	"github.com/microlet/microlet/services/podsyncd/internal/containerlogs"
	"github.com/microlet/microlet/services/podsyncd/internal/devicemanager"
	"github.com/microlet/microlet/services/podsyncd/internal/eviction"
	"github.com/microlet/microlet/services/podsyncd/internal/imagegc"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
	"github.com/microlet/microlet/services/podsyncd/internal/nodeshutdown"
	"github.com/microlet/microlet/services/podsyncd/internal/podcgroups"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
	"github.com/microlet/microlet/services/podsyncd/internal/podworkers"
	"github.com/microlet/microlet/services/podsyncd/internal/pullmanager"
	"github.com/microlet/microlet/services/podsyncd/internal/syncloop"
)

// Config is podsyncd's configuration.
type Config struct {
	service.Common `yaml:",inline"`

	PodLogsDir         string        `yaml:"pod_logs_dir" flag:"pod-logs-dir" usage:"root of the pod log directories (<ns>_<name>_<uid>/<container>/<restart>.log)"`
	DevicePluginsDir   string        `yaml:"device_plugins_dir" flag:"device-plugins-dir" usage:"directory of the device plugin sockets, the Registration socket kubelet.sock among them (empty: <data-dir>/device-plugins; the kubelet's is /var/lib/kubelet/device-plugins)"`
	BackoffInitial     time.Duration `yaml:"crashloop_backoff_initial" flag:"crashloop-backoff-initial" usage:"first CrashLoopBackOff delay"`
	BackoffMax         time.Duration `yaml:"crashloop_backoff_max" flag:"crashloop-backoff-max" usage:"largest CrashLoopBackOff delay"`
	RuntimeTimeout     time.Duration `yaml:"runtime_request_timeout" flag:"runtime-request-timeout" usage:"request timeout of the CRI client (cri-client): bounds each CRI call; sandbox creation gets twice it, StopContainer and ExecSync their own timeout on top; image pulls are not bounded"`
	SeccompProfileRoot string        `yaml:"seccomp_profile_root" flag:"seccomp-profile-root" usage:"directory of Localhost seccomp profiles (default <data_dir>/seccomp)"`
	SeccompDefault     bool          `yaml:"seccomp_default" flag:"seccomp-default" usage:"give containers without a seccomp profile the runtime's default profile instead of none"`
	ClusterDNS         []string      `yaml:"cluster_dns" flag:"cluster-dns" usage:"IP addresses of the cluster DNS servers for dnsPolicy ClusterFirst pods (the kubelet's clusterDNS); empty: such pods use the host's resolver"`
	ClusterDomain      string        `yaml:"cluster_domain" flag:"cluster-domain" usage:"the cluster's DNS domain, searched by ClusterFirst pods (the kubelet's clusterDomain)"`
	ResolvConf         string        `yaml:"resolv_conf" flag:"resolv-conf" usage:"resolver file that dnsPolicy Default pods get and ClusterFirst pods take search paths from; empty: a resolver on the pod's loopback only"`

	// The loop's periods, container GC (the kubelet's flags of the same
	// names), container log rotation and symlinks, image GC
	// (KubeletConfiguration names): each part's own config, inline.
	Loop        syncloop.Config      `yaml:",inline"`
	ContainerGC containergc.Config   `yaml:",inline"`
	Logs        containerlogs.Config `yaml:",inline"`
	ImageGC     imagegc.Config       `yaml:",inline"`

	ImagePullCredentialsVerificationPolicy string   `yaml:"image_pull_credentials_verification_policy" flag:"image-pull-credentials-verification-policy" usage:"when a pod may use an image already on the node without pulling it with its own credentials: NeverVerify, NeverVerifyPreloadedImages (images podsyncd did not pull), NeverVerifyAllowlistedImages or AlwaysVerify"`
	PreloadedImagesVerificationAllowlist   []string `yaml:"preloaded_images_verification_allowlist" flag:"preloaded-images-verification-allowlist" usage:"images (no tag or digest; a trailing /* matches a prefix) exempt from verification under NeverVerifyAllowlistedImages"`

	ImageCredentialProviderConfig string `yaml:"image_credential_provider_config" flag:"image-credential-provider-config" usage:"CredentialProviderConfig file (kubelet.config.k8s.io/v1) of image credential provider exec plugins; empty: none"`
	ImageCredentialProviderBinDir string `yaml:"image_credential_provider_bin_dir" flag:"image-credential-provider-bin-dir" usage:"directory of the image credential provider plugins"`

	CgroupsPerQOS bool   `yaml:"cgroups_per_qos" flag:"cgroups-per-qos" usage:"run pods in the kubelet's QoS cgroup hierarchy (kubepods, burstable, besteffort, one cgroup per pod) passed to sandboxes as their cgroup parent"`
	CgroupRoot    string `yaml:"cgroup_root" flag:"cgroup-root" usage:"cgroupfs path below which kubepods is made (created when missing); give nodes sharing a host different roots"`
	CgroupDriver  string `yaml:"cgroup_driver" flag:"cgroup-driver" usage:"cgroupfs or systemd, used only when the runtime does not report its driver (CRI RuntimeConfig)"`
	PodPidsLimit  int64  `yaml:"pod_pids_limit" flag:"pod-pids-limit" usage:"most processes in one pod (pids.max of its cgroup); -1 or 0: unlimited"`
	CPUCFSQuota   bool   `yaml:"cpu_cfs_quota" flag:"cpu-cfs-quota" usage:"enforce CPU limits with CFS quota on pod cgroups"`
	// The eviction manager: the kubelet's settings of the same names
	// (KubeletConfiguration), judged there and nowhere else.
	Eviction eviction.Settings `yaml:",inline"`

	AllowedUnsafeSysctls []string `yaml:"allowed_unsafe_sysctls" flag:"allowed-unsafe-sysctls" usage:"unsafe sysctls (or prefixes ending in *) pods may set beyond the safe ones, e.g. kernel.msg*,net.core.somaxconn"`

	KubeReserved   map[string]string `yaml:"kube_reserved" flag:"kube-reserved" usage:"resources reserved for node daemons (cpu=100m,memory=256Mi,pid=1000), kept out of kubepods; give nodestatusd the same"`
	SystemReserved map[string]string `yaml:"system_reserved" flag:"system-reserved" usage:"resources reserved for the OS, kept out of kubepods; give nodestatusd the same"`

	// Graceful node shutdown: the kubelet's shutdownGracePeriod,
	// shutdownGracePeriodCriticalPods and shutdownGracePeriodByPodPriority,
	// and where logind is.
	Shutdown nodeshutdown.Config `yaml:",inline"`
}

// Server is the podsyncd service.
type Server struct {
	podsyncv1.UnimplementedPodSyncServiceServer
	cfg Config
	// loop and evictions are built in Run while the gRPC server already
	// serves (GetNodePressure is polled from start-up on): published
	// atomically, nil until then.
	loop      atomic.Pointer[syncloop.Loop]
	evictions atomic.Pointer[eviction.Manager]
	devices   atomic.Pointer[devicemanager.Manager]
	metrics   *kubeletmetrics.Metrics
	// settings is the config as Register parsed it, what Run builds from.
	settings *settings
}

// New returns the service with the kubelet's defaults, each part's from
// its own Default.
func New() *Server {
	return &Server{metrics: kubeletmetrics.New(), cfg: Config{
		Common:         service.DefaultCommon(),
		PodLogsDir:     "/var/log/pods",
		BackoffInitial: podruntime.DefaultBackoffInitial,
		BackoffMax:     podruntime.DefaultBackoffMax,
		RuntimeTimeout: 2 * time.Minute,
		ResolvConf:     "/etc/resolv.conf",

		Loop:          syncloop.Default(),
		ContainerGC:   containergc.Default(),
		Logs:          containerlogs.Default(),
		ImageGC:       imagegc.Default(),
		Shutdown:      nodeshutdown.Default(),
		CgroupsPerQOS: true,
		CgroupRoot:    "/",
		CgroupDriver:  podcgroups.DriverCgroupfs,
		PodPidsLimit:  -1,
		CPUCFSQuota:   true,

		Eviction: eviction.DefaultSettings(),

		ImagePullCredentialsVerificationPolicy: pullmanager.DefaultPolicy,
	}}
}

// Name implements service.Service.
func (s *Server) Name() string { return components.PodSyncd }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return &s.cfg }

// Register implements service.Service: it parses and checks the whole
// config once (complete), keeping what Run builds from, and registers the
// API.
func (s *Server) Register(env *service.Env) error {
	st, err := s.cfg.complete(env.Log)
	if err != nil {
		return err
	}
	s.settings = st
	podsyncv1.RegisterPodSyncServiceServer(env.Server.GRPC(), s)
	// --metrics-addr serves the kubelet's metrics too, beside the process's.
	env.Gather(s.metrics.Kubelet())
	env.Gather(s.metrics.Probes())
	return nil
}

// devicePluginsDir is DevicePluginsDir, or device-plugins in the data dir.
func (c *Config) devicePluginsDir() string {
	if c.DevicePluginsDir != "" {
		return c.DevicePluginsDir
	}
	return filepath.Join(c.DataDir, "device-plugins")
}

// Run implements service.Service: it waits for the runtime, builds every
// subsystem once (build), publishes what the handlers read, and runs the
// loops until ctx ends.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	c := &s.cfg
	conns, err := dialPeers(c)
	if err != nil {
		return err
	}
	defer func() {
		for _, cc := range conns {
			_ = cc.Close()
		}
	}()
	s.metrics.SetNodeName(c.NodeName)
	s.metrics.SetCgroupVersion(cgroupVersion())
	// The runtime must answer before anything can be synced: until it does,
	// Connect warns and retries (runtime-shim may be restarting). Its one
	// pair of cri-client services, one connection per endpoint, serves the
	// sync loop and the stats alike; RuntimeTimeout is their request
	// timeout.
	cri, err := criclient.Connect(ctx, c.Endpoint(components.RuntimeShim), c.ImageServiceEndpoint(), c.RuntimeTimeout, env.Log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer cri.Close()
	p, err := s.build(ctx, env, cri, conns)
	if err != nil {
		return err
	}
	defer p.close()
	// A device plugins directory that cannot be served (not writable, a
	// socket path too long) costs the device plugins only, not the pods.
	devices := devicemanager.New(c.devicePluginsDir(), env.Log)
	if err := devices.Start(ctx); err != nil {
		env.Log.Error("device plugin manager not started; no device plugin can register", "err", err)
	} else {
		defer devices.Wait()
		s.devices.Store(devices)
	}
	s.evictions.Store(p.evictions)
	s.loop.Store(p.loop)
	env.Ready()
	p.run(ctx)
	return nil
}

// dialPeers connects (lazily) to podconfig, statusd and nodestatusd.
func dialPeers(c *Config) (map[string]*grpc.ClientConn, error) {
	conns := map[string]*grpc.ClientConn{}
	for _, name := range []string{components.PodConfig, components.Statusd, components.NodeStatusd} {
		cc, err := grpcclient.Dial(c.Endpoint(name))
		if err != nil {
			for _, open := range conns {
				_ = open.Close()
			}
			return nil, fmt.Errorf("%s endpoint: %w", name, err)
		}
		conns[name] = cc
	}
	return conns, nil
}

// statsProvider is the node's stats Summary the eviction manager judges:
// nodefs is the data dir's filesystem, the pod log dirs are podsyncd's,
// imagefs is the runtime's ImageFsInfo, and with pod cgroups the node's
// memory is that of cgroup_root (the whole machine when it is "/"). It
// reads the CRI through the sync loop's services.
func (s *Server) statsProvider(env *service.Env, rt criapi.RuntimeService, img criapi.ImageManagerService, nodeCgroup bool) *stats.Provider {
	c := &s.cfg
	opts := []stats.Option{stats.WithNodeName(c.NodeName), stats.WithRootDir(c.DataDir), stats.WithPodLogsDir(c.PodLogsDir),
		stats.WithVolumeStatsPeriod(c.Eviction.VolumeStatsAggPeriod), stats.WithLogger(env.Log)}
	if nodeCgroup {
		opts = append(opts, stats.WithNodeCgroup(c.CgroupRoot))
	}
	return stats.New(rt, img, opts...)
}

// dedicatedImageFs says whether the runtime's image filesystem is another
// device than the data dir's (the kubelet's HasDedicatedImageFs).
func dedicatedImageFs(ctx context.Context, img criapi.ImageManagerService, dataDir string) (bool, error) {
	resp, err := img.ImageFsInfo(ctx)
	if err != nil {
		return false, fmt.Errorf("image filesystem info: %w", err)
	}
	if len(resp.ImageFilesystems) == 0 {
		return false, nil
	}
	mp := resp.ImageFilesystems[0].GetFsId().GetMountpoint()
	var a, b unix.Stat_t
	if err := unix.Stat(dataDir, &a); err != nil {
		return false, fmt.Errorf("data dir: %w", err)
	}
	if mp == "" || unix.Stat(mp, &b) != nil {
		return false, nil // not visible here: judged as one disk
	}
	return a.Dev != b.Dev, nil
}

// GetNodePressure implements PodSyncService: the eviction manager's judgement.
func (s *Server) GetNodePressure(context.Context, *podsyncv1.GetNodePressureRequest) (*podsyncv1.GetNodePressureResponse, error) {
	resp := &podsyncv1.GetNodePressureResponse{}
	evictions := s.evictions.Load()
	if evictions == nil {
		return resp, nil
	}
	p := evictions.Pressure()
	resp.Synchronized = p.Synchronized
	resp.MemoryPressure = p.Has(corev1.NodeMemoryPressure)
	resp.DiskPressure = p.Has(corev1.NodeDiskPressure)
	resp.PidPressure = p.Has(corev1.NodePIDPressure)
	for _, sig := range p.Signals {
		resp.Signals = append(resp.Signals, string(sig))
	}
	return resp, nil
}

// GetDeviceResources implements PodSyncService: the extended resources the
// registered device plugins advertise, sorted by name; none before the
// device manager has started.
func (s *Server) GetDeviceResources(context.Context, *podsyncv1.GetDeviceResourcesRequest) (*podsyncv1.GetDeviceResourcesResponse, error) {
	resp := &podsyncv1.GetDeviceResourcesResponse{}
	devices := s.devices.Load()
	if devices == nil {
		return resp, nil
	}
	res := devices.Resources()
	for _, name := range slices.Sorted(maps.Keys(res)) {
		r := res[name]
		resp.Resources = append(resp.Resources, &podsyncv1.DeviceResource{Name: name, Capacity: r.Capacity, Allocatable: r.Allocatable})
	}
	return resp, nil
}

// GetMetrics implements PodSyncService: one set of the kubelet's metrics
// podsyncd keeps, encoded for nodeapi to serve.
func (s *Server) GetMetrics(_ context.Context, req *podsyncv1.GetMetricsRequest) (*podsyncv1.GetMetricsResponse, error) {
	var g prometheus.Gatherer
	switch req.GetSet() {
	case podsyncv1.MetricsSet_METRICS_SET_KUBELET:
		g = s.metrics.Kubelet()
	case podsyncv1.MetricsSet_METRICS_SET_PROBES:
		g = s.metrics.ProbesEndpoint()
	default:
		return nil, status.Errorf(codes.InvalidArgument, "set: want METRICS_SET_KUBELET or METRICS_SET_PROBES, got %s", req.GetSet())
	}
	mfs, err := g.Gather()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "gather: %v", err)
	}
	b, err := promwire.Encode(mfs)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	return &podsyncv1.GetMetricsResponse{Families: b}, nil
}

// cgroupVersion is the host's cgroup version for kubelet_cgroup_version.
func cgroupVersion() int {
	if ocgroups.IsCgroup2UnifiedMode() {
		return 2
	}
	return 1
}

// ListPodWorkers implements PodSyncService.
func (s *Server) ListPodWorkers(context.Context, *podsyncv1.ListPodWorkersRequest) (*podsyncv1.ListPodWorkersResponse, error) {
	resp := &podsyncv1.ListPodWorkersResponse{}
	loop := s.loop.Load()
	if loop == nil {
		return resp, nil
	}
	for _, w := range loop.Workers() {
		st := podsyncv1.WorkerState_WORKER_STATE_SYNCING
		switch w.State {
		case podworkers.Terminating:
			st = podsyncv1.WorkerState_WORKER_STATE_TERMINATING
		case podworkers.Terminated:
			st = podsyncv1.WorkerState_WORKER_STATE_TERMINATED
		}
		resp.Workers = append(resp.Workers, &podsyncv1.PodWorker{PodUid: string(w.UID), Namespace: w.Namespace, Name: w.Name, State: st, LastError: w.LastError})
	}
	return resp, nil
}
