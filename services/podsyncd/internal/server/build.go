package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/criclient"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/service"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/podsyncd/internal/admission"
	"github.com/microlet/microlet/services/podsyncd/internal/allocation"
	"github.com/microlet/microlet/services/podsyncd/internal/containergc"
	"github.com/microlet/microlet/services/podsyncd/internal/containerlogs"
	"github.com/microlet/microlet/services/podsyncd/internal/credprovider"
	"github.com/microlet/microlet/services/podsyncd/internal/dns"
	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
	"github.com/microlet/microlet/services/podsyncd/internal/events"
	"github.com/microlet/microlet/services/podsyncd/internal/eviction"
	"github.com/microlet/microlet/services/podsyncd/internal/imagegc"
	"github.com/microlet/microlet/services/podsyncd/internal/nodeshutdown"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
	"github.com/microlet/microlet/services/podsyncd/internal/pullmanager"
	"github.com/microlet/microlet/services/podsyncd/internal/pullsecrets"
	"github.com/microlet/microlet/services/podsyncd/internal/resources"
	"github.com/microlet/microlet/services/podsyncd/internal/runtimeclass"
	"github.com/microlet/microlet/services/podsyncd/internal/runtimehandlers"
	"github.com/microlet/microlet/services/podsyncd/internal/securitycontext"
	"github.com/microlet/microlet/services/podsyncd/internal/syncloop"
	"github.com/microlet/microlet/services/podsyncd/internal/volumes"
)

// settings is the config as complete parsed and checked it: the values the
// subsystems are built from, each parsed once.
type settings struct {
	dns         dns.Config
	seccompRoot string
	gc          containergc.Policy
	images      imagegc.Policy
	logs        containerlogs.Policy
	eviction    eviction.Config
	pullPolicy  pullmanager.Policy
	sysctls     *admission.Sysctls
	shutdown    nodeshutdown.Config
	// appArmor is the AppArmor admission handler, the host asked once;
	// nil off Linux, where the kubelet has none.
	appArmor *admission.AppArmor
	// credentials are the image credential provider plugins; nil without
	// a config.
	credentials *credprovider.Providers
}

// complete parses and checks the config, returning every error at once,
// each naming its key: the parts' own checks (their Validate), then the
// parsers that report plain errors.
func (c *Config) complete(log *slog.Logger) (*settings, error) {
	st := &settings{
		dns:         dns.Config{ClusterDNS: c.ClusterDNS, ClusterDomain: c.ClusterDomain, ResolvConf: c.ResolvConf, NodeName: c.NodeName},
		seccompRoot: c.SeccompProfileRoot,
		gc:          c.ContainerGC.Policy(),
		images:      c.ImageGC.Policy(),
		shutdown:    c.Shutdown,
	}
	if st.seccompRoot == "" {
		st.seccompRoot = filepath.Join(c.DataDir, "seccomp")
	}
	fieldErrs := c.Loop.Validate()
	fieldErrs = append(fieldErrs, c.ContainerGC.Validate()...)
	fieldErrs = append(fieldErrs, c.ImageGC.Validate()...)
	fieldErrs = append(fieldErrs, c.Shutdown.Validate()...)
	var logErrs field.ErrorList
	st.logs, logErrs = c.Logs.Policy()
	fieldErrs = append(fieldErrs, logErrs...)
	fieldErrs = append(fieldErrs, config.Positive(field.NewPath("crashloop_backoff_initial"), c.BackoffInitial)...)
	fieldErrs = append(fieldErrs, config.Positive(field.NewPath("crashloop_backoff_max"), c.BackoffMax)...)
	if c.BackoffMax < c.BackoffInitial {
		fieldErrs = append(fieldErrs, field.Invalid(field.NewPath("crashloop_backoff_max"), c.BackoffMax.String(),
			fmt.Sprintf("must not be below crashloop_backoff_initial (%s)", c.BackoffInitial)))
	}
	fieldErrs = append(fieldErrs, config.Positive(field.NewPath("runtime_request_timeout"), c.RuntimeTimeout)...)
	fieldErrs = append(fieldErrs, c.Eviction.Validate()...)
	if c.PodLogsDir == "" {
		fieldErrs = append(fieldErrs, field.Required(field.NewPath("pod_logs_dir"), ""))
	}
	errs := []error{config.Join(fieldErrs)}
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	check(st.dns.Validate())
	check(c.checkCgroups())
	var err error
	st.pullPolicy, err = pullmanager.NewPolicy(c.ImagePullCredentialsVerificationPolicy, c.PreloadedImagesVerificationAllowlist)
	check(err)
	st.eviction, err = c.Eviction.Config()
	check(err)
	st.sysctls, err = admission.NewSysctls(c.AllowedUnsafeSysctls, admission.KernelVersion())
	check(err)
	if runtime.GOOS == "linux" {
		st.appArmor = admission.NewAppArmor(admission.KernelAppArmor{})
	}
	if c.ImageCredentialProviderConfig != "" {
		st.credentials, err = credprovider.Load(c.ImageCredentialProviderConfig, c.ImageCredentialProviderBinDir, log)
		check(err)
	}
	return st, errors.Join(errs...)
}

// parts are podsyncd's subsystems, built once by build; run starts their
// loops.
type parts struct {
	loop      *syncloop.Loop
	evictions *eviction.Manager
	ready     *nodeshutdown.ReadyReporter
	shutdown  *nodeshutdown.Manager
	rotator   *containerlogs.Rotator
	imageGC   *imagegc.GC
	handlers  *runtimehandlers.Handlers
	// classes resolves RuntimeClasses; nil standalone (default handler).
	classes *runtimeclass.Classes
	// services feeds pods' service env vars; nil standalone.
	services *envvars.InformerServices
	// closers release what build opened, in reverse order.
	closers []func()

	logInterval, imageGCPeriod time.Duration
}

// build makes every subsystem once, in dependency order, from the settings
// Register completed, the runtime's cri-client services and the peers'
// connections. Nothing runs yet.
func (s *Server) build(ctx context.Context, env *service.Env, cri *criclient.Services, conns map[string]*grpc.ClientConn) (p *parts, err error) {
	c, st := &s.cfg, s.settings
	p = &parts{logInterval: c.Logs.MonitorInterval, imageGCPeriod: c.ImageGC.Period}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	// Every CRI call counts (kubelet_runtime_operations_*), as through the
	// kubelet's instrumented runtime service.
	rt, img := s.metrics.InstrumentRuntime(cri.Runtime), s.metrics.InstrumentImages(cri.Images)
	// ConfigMaps and Secrets for env (and volumes) are read with the node's
	// identity; standalone nodes have none.
	var (
		objects envvars.Source
		tokens  volumes.Tokens
	)
	client, _, err := kubeclient.Clientset(c.Kubeconfig, components.PodSyncd, 20, 40)
	var freshNode func(context.Context) (*corev1.Node, error)
	switch {
	case errors.Is(err, kubeclient.ErrStandalone):
	case err != nil:
		return nil, err
	default:
		objects = envvars.ClientSource{Client: client}
		tokens = volumes.ClientTokens{Client: client}
		p.services = envvars.NewInformerServices(client)
		p.classes = runtimeclass.New(client)
		freshNode = func(ctx context.Context) (*corev1.Node, error) {
			return client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
		}
	}
	// Events go to the API server as the kubelet's do; standalone, to the log.
	recorder, stopEvents := events.New(client, c.NodeName, events.Component, env.Log)
	p.closers = append(p.closers, stopEvents)
	dnsConf, err := dns.New(st.dns, recorder)
	if err != nil {
		return nil, err
	}
	dnsConf.CheckResolvConf()
	memCapacity, err := resources.MemoryCapacity()
	if err != nil {
		env.Log.Warn("machine memory unknown; Burstable containers get OOM score adjustment 999", "err", err)
	}
	// Allocated and actuated resources (in-place resize) survive restarts.
	alloc, err := allocation.Open(filepath.Join(c.DataDir, "allocation"), env.Log)
	if err != nil {
		return nil, err
	}
	// The node's credentials after the pods' secrets: docker config files
	// (the kubelet's default keyring, its root dir being our data dir),
	// then the credential provider plugins.
	creds := []podruntime.Credentials{pullsecrets.NewDockerConfigFiles(c.DataDir, env.Log)}
	if st.credentials != nil {
		creds = append(creds, st.credentials)
	}
	// Which credentials pulled each image survives restarts, as the
	// kubelet's <root>/image_manager.
	pullRecords, err := pullmanager.New(ctx, c.DataDir, st.pullPolicy, img, env.Log)
	if err != nil {
		return nil, err
	}
	cgroups := s.podCgroups(ctx, env, rt, memCapacity)
	var cgroupParent func(*corev1.Pod) string
	var podCgroup podruntime.PodCgroupResizer
	if cgroups != nil {
		cgroupParent, podCgroup = cgroups.Parent, cgroups
	}
	// The runtime's handlers and their features, as the kubelet's runtime
	// state keeps them; read once now (the runtime answered), then by run.
	p.handlers = runtimehandlers.New(rt, env.Log)
	if err := p.handlers.Refresh(ctx); err != nil {
		env.Log.Warn("runtime handlers not read yet; recursive read-only mounts count as unsupported until they are", "err", err)
	}
	startup := s.metrics.NewStartupTracker(nil)
	var services envvars.Services
	if p.services != nil {
		services = p.services
	}
	rm := podruntime.NewManager(rt, img, podruntime.Options{
		LogRoot:        c.PodLogsDir,
		RuntimeName:    strings.ToLower(cri.Version.RuntimeName),
		BackoffInitial: c.BackoffInitial,
		BackoffMax:     c.BackoffMax,
		Log:            env.Log,
		Objects:        objects,
		Volumes:        volumes.New(c.DataDir, objects, tokens),
		Security:       securitycontext.Options{SeccompProfileRoot: st.seccompRoot, SeccompDefault: c.SeccompDefault},
		MemoryCapacity: memCapacity,
		DNS:            dnsConf,
		Services:       services,
		Recorder:       recorder,
		LogSymlinkDir:  c.Logs.SymlinkDir,
		Actuated:       alloc,
		CgroupParent:   cgroupParent,
		Credentials:    creds,
		PodCgroup:      podCgroup,
		PullRecords:    pullRecords,
		Metrics:        s.metrics,
		Startup:        startup,

		RecursiveReadOnly: p.handlers.SupportsRecursiveReadOnlyMounts,
		RuntimeHandler:    p.classes.Handler,
	})
	gc := containergc.New(rt, st.gc, containergc.Options{PodLogsDir: c.PodLogsDir, SymlinkDir: c.Logs.SymlinkDir, Log: env.Log})
	p.rotator = containerlogs.NewRotator(rt, st.logs, env.Log, nil)
	p.imageGC = imagegc.New(rt, img, st.images, imagegc.Options{Recorder: recorder, NodeName: c.NodeName, Log: env.Log,
		AfterPass: pullRecords.PruneUnknownRecords, Metrics: s.metrics})
	summary := s.statsProvider(env, rt, img, cgroups != nil)
	evDeps := eviction.Deps{
		Summary:          func(ctx context.Context) (*statsv1alpha1.Summary, error) { return summary.Summary(ctx, false) },
		DedicatedImageFs: func(ctx context.Context) (bool, error) { return dedicatedImageFs(ctx, img, c.DataDir) },
		DeleteUnusedImages: func(ctx context.Context) error {
			res, err := p.imageGC.DeleteUnusedImages(ctx)
			if len(res.Removed) > 0 {
				env.Log.Info("eviction: removed unused images", "images", len(res.Removed), "freedBytes", res.Freed)
			}
			return err
		},
		Recorder: recorder,
		NodeName: c.NodeName,
		Log:      env.Log,
		Metrics:  s.metrics,
	}
	// The manager acts through the loop and the loop admits through the
	// manager: the manager's hooks reach the loop once both exist (its
	// first pass runs after run starts it).
	evDeps.ActivePods = func() []*corev1.Pod { return p.loop.ActivePods() }
	evDeps.Evict = func(pod *corev1.Pod, grace int64, msg string, cond bool) { p.loop.Evict(pod, grace, msg, cond) }
	evDeps.PodCleanedUp = func(uid types.UID) bool { return p.loop.PodStopped(uid) }
	evDeps.DeleteUnusedContainers = func(ctx context.Context) error { return p.loop.DeleteAllUnusedContainers(ctx) }
	p.evictions = eviction.New(st.eviction, evDeps)
	nodes := nodestatusv1.NewNodeStatusServiceClient(conns[components.NodeStatusd])
	// Graceful node shutdown: the manager refuses pods and stops them
	// through the loop; the node's Ready condition is nodestatusd's, told
	// through ReportReadyErrors.
	p.ready = nodeshutdown.NewReadyReporter(nodes, env.Log, 0)
	p.shutdown = nodeshutdown.New(st.shutdown, env.Log, nodeshutdown.WithRecorder(recorder, c.NodeName),
		nodeshutdown.WithReadyErrors(p.ready.Set), nodeshutdown.WithState(c.DataDir, s.metrics))
	p.loop = syncloop.New(env.Log, rm, rt,
		podconfigv1.NewPodConfigServiceClient(conns[components.PodConfig]),
		statusdv1.NewStatusServiceClient(conns[components.Statusd]),
		nodes,
		syncloop.Options{ResyncPeriod: c.Loop.ResyncPeriod, RelistPeriod: c.Loop.RelistPeriod, HousekeepingPeriod: c.Loop.HousekeepingPeriod,
			ContainerGC: gc, ContainerGCPeriod: c.ContainerGC.Period, Allocation: alloc, Cgroups: syncloopCgroups(cgroups),
			FreshNode: freshNode, AdmitPressure: p.evictions.Admit, Sysctls: st.sysctls, AppArmor: st.appArmor, Shutdown: p.shutdown, Metrics: s.metrics, Startup: startup,
			Registerer: env.Registry})
	return p, nil
}

// run starts every loop and blocks in the sync loop until ctx ends.
func (p *parts) run(ctx context.Context) {
	if p.services != nil {
		p.services.Start(ctx)
	}
	p.classes.Start(ctx)
	go p.handlers.Run(ctx, runtimehandlers.DefaultPeriod)
	go p.rotator.Run(ctx, p.logInterval)
	go p.imageGC.Run(ctx, p.imageGCPeriod)
	go p.evictions.Run(ctx)
	go p.ready.Run(ctx)
	go p.shutdown.Run(ctx, p.loop)
	p.loop.Run(ctx)
}

// close releases what build opened, newest first.
func (p *parts) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}
