package controllers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	cloudprovider "k8s.io/cloud-provider"
	nodecontroller "k8s.io/cloud-provider/controllers/node"
	nodelifecyclecontroller "k8s.io/cloud-provider/controllers/nodelifecycle"
	routecontroller "k8s.io/cloud-provider/controllers/route"
	servicecontroller "k8s.io/cloud-provider/controllers/service"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/pkg/clientbuilder"
	// Registers the controller-manager feature gates (the route controller
	// asks one) in the default gate, as cloud-controller-manager's options do.
	_ "k8s.io/controller-manager/pkg/features/register"
)

// ErrLeadershipLost is what Run returns when this process held the Lease and
// could not renew it: another replica may be acting now, so this one must not.
var ErrLeadershipLost = errors.New("leader election lost: the Lease was not renewed in time")

// Manager runs the selected controllers, under leader election when enabled.
type Manager struct {
	cfg     Config
	rest    *rest.Config
	cloud   cloudprovider.Interface
	log     *slog.Logger
	metrics *controllersmetrics.ControllerManagerMetrics

	leader  prometheus.Gauge
	running *prometheus.GaugeVec
}

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithRegistry registers the Manager's metrics: cloudsyncd_leader (1 while
// this process holds the Lease, or always without election) and
// cloudsyncd_controller_running{controller}.
func WithRegistry(r prometheus.Registerer) Option {
	return func(m *Manager) { r.MustRegister(m.leader, m.running) }
}

// New checks cfg and returns a Manager for cloud. restConfig is the
// credential the controllers act with (see deploy/cloudsyncd-controllers-rbac.yaml).
func New(cfg Config, restConfig *rest.Config, cloud cloudprovider.Interface, opts ...Option) (*Manager, error) {
	if len(cfg.Controllers) == 0 {
		return nil, errors.New("no controller selected")
	}
	if _, err := ParseNames(cfg.Controllers); err != nil {
		return nil, err
	}
	if cloud == nil {
		return nil, errors.New("no cloud provider")
	}
	if cfg.Has(Route) && len(cfg.ClusterCIDRs) == 0 {
		return nil, errors.New("the route controller needs the cluster CIDR")
	}
	if cfg.ConcurrentServiceSyncs < 1 || cfg.ConcurrentNodeSyncs < 1 {
		return nil, errors.New("worker counts must be at least 1")
	}
	m := &Manager{
		cfg:     cfg,
		rest:    restConfig,
		cloud:   cloud,
		log:     slog.Default(),
		metrics: controllersmetrics.NewControllerManagerMetrics("cloudsyncd"),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cloudsyncd_leader",
			Help: "1 while this cloudsyncd holds the controllers' Lease (or runs them without election), else 0.",
		}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cloudsyncd_controller_running",
			Help: "1 while the named cloud controller runs in this process.",
		}, []string{"controller"}),
	}
	for _, o := range opts {
		o(m)
	}
	m.log = m.log.With("component", "controllers")
	controllersmetrics.Register()
	if cfg.LeaderElection.Enabled {
		// The elector refuses bad timings; fail here, at startup, instead.
		probe := &resourcelock.LeaseLock{LockConfig: resourcelock.ResourceLockConfig{Identity: "probe"}}
		nop := leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}}
		if _, err := leaderelection.NewLeaderElector(m.electionConfig(probe, nop)); err != nil {
			return nil, fmt.Errorf("leader election: %w", err)
		}
	}
	return m, nil
}

// Run runs the controllers until ctx ends. With leader election it first
// waits to acquire the Lease (standing by, with no controller running);
// when the Lease is lost it stops the controllers and returns
// ErrLeadershipLost. When ctx ends it stops the controllers, then releases
// the Lease, and returns nil.
func (m *Manager) Run(ctx context.Context) error {
	if !m.cfg.LeaderElection.Enabled {
		m.leader.Set(1)
		defer m.leader.Set(0)
		m.log.Info("running cloud controllers without leader election", "controllers", m.cfg.Controllers)
		return m.runControllers(ctx)
	}

	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		stopping bool
		runErr   error
	)
	// stopAll keeps a late OnStartedLeading from starting anything once Run
	// is on its way out, then waits for what did start.
	stopAll := func() {
		mu.Lock()
		stopping = true
		mu.Unlock()
		wg.Wait()
	}
	// The elector lives in its own context: on shutdown the controllers must
	// stop before the Lease is released (ReleaseOnCancel), or a standby could
	// act while they still write.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()
	le, err := m.elector(func(leadCtx context.Context) {
		mu.Lock()
		defer mu.Unlock()
		if stopping {
			return
		}
		m.leader.Set(1)
		m.log.Info("became leader: starting cloud controllers", "lease", m.leaseRef(), "identity", m.cfg.LeaderElection.Identity, "controllers", m.cfg.Controllers)
		cctx, cancel := context.WithCancel(leadCtx)
		stop := context.AfterFunc(ctx, cancel)
		wg.Go(func() {
			defer stop()
			defer cancel()
			if err := m.runControllers(cctx); err != nil {
				mu.Lock()
				runErr = err
				mu.Unlock()
				cancelElect()
			}
		})
	}, func() { m.leader.Set(0) })
	if err != nil {
		return err
	}
	m.log.Info("standing by for leader election", "lease", m.leaseRef(), "identity", m.cfg.LeaderElection.Identity)
	done := make(chan struct{})
	go func() { defer close(done); le.Run(electCtx) }()

	select {
	case <-ctx.Done():
		// Controllers stop through ctx; wait, then let the elector release.
		stopAll()
		cancelElect()
		<-done
		m.log.Info("stopped; Lease released", "lease", m.leaseRef())
		return nil
	case <-done:
		// The elector ended on its own: renewal failed or the controllers
		// could not start. Their context is the elector's, so they stop.
		stopAll()
		mu.Lock()
		err := runErr
		mu.Unlock()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		m.log.Error("lost the Lease: stopping so that only the new leader acts", "lease", m.leaseRef())
		return ErrLeadershipLost
	}
}

func (m *Manager) leaseRef() string {
	return m.cfg.LeaderElection.Namespace + "/" + m.cfg.LeaderElection.Name
}

// identity is the hostname plus a random suffix, as the controller managers
// do, so two processes on one host never share an identity.
func identity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "cloudsyncd"
	}
	return host + "_" + rand.String(8)
}

func (m *Manager) elector(onStart func(context.Context), onStop func()) (*leaderelection.LeaderElector, error) {
	le := m.cfg.LeaderElection
	id := le.Identity
	if id == "" {
		id = identity()
		m.cfg.LeaderElection.Identity = id
	}
	// Each Lease request is bounded by the renew deadline, as upstream's
	// resourcelock.NewFromKubeconfig does.
	rc := rest.CopyConfig(m.rest)
	rc.Timeout = le.RenewDeadline
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(rc, "leader-election"))
	if err != nil {
		return nil, fmt.Errorf("leader election client: %w", err)
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "cloudsyncd"})
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: le.Namespace, Name: le.Name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id, EventRecorder: recorder},
	}
	elector, err := leaderelection.NewLeaderElector(m.electionConfig(lock, leaderelection.LeaderCallbacks{
		OnStartedLeading: onStart,
		OnStoppedLeading: func() { onStop(); broadcaster.Shutdown() },
		OnNewLeader: func(holder string) {
			if holder != id {
				m.log.Info("leader is another replica", "lease", m.leaseRef(), "leader", holder, "identity", id)
			}
		},
	}))
	if err != nil {
		broadcaster.Shutdown()
		return nil, fmt.Errorf("leader election: %w", err)
	}
	return elector, nil
}

func (m *Manager) electionConfig(lock resourcelock.Interface, cb leaderelection.LeaderCallbacks) leaderelection.LeaderElectionConfig {
	le := m.cfg.LeaderElection
	return leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks:       cb,
	}
}

// resync returns the informers' resync period, jittered between one and two
// times the minimum so that informers do not resync in lock-step.
func (m *Manager) resync() time.Duration {
	return time.Duration(float64(m.cfg.MinResyncPeriod) * (1 + mathrand.Float64()))
}

// runControllers builds and runs the selected controllers until ctx ends,
// the way k8s.io/cloud-provider/app does for cloud-controller-manager.
func (m *Manager) runControllers(ctx context.Context) error {
	builder := clientbuilder.SimpleControllerClientBuilder{ClientConfig: m.rest}
	infClient, err := builder.Client("shared-informers")
	if err != nil {
		return fmt.Errorf("informer client: %w", err)
	}
	factory := informers.NewSharedInformerFactory(infClient, m.resync())
	defer factory.Shutdown()

	m.cloud.Initialize(builder, ctx.Done())
	if iu, ok := m.cloud.(cloudprovider.InformerUser); ok {
		iu.SetInformers(factory)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	var started []string
	for _, name := range m.cfg.Controllers {
		run, err := m.build(ctx, name, builder, factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", name, err)
		}
		if run == nil {
			continue
		}
		started = append(started, name)
		wg.Go(func() {
			m.running.WithLabelValues(name).Set(1)
			defer m.running.WithLabelValues(name).Set(0)
			run()
		})
	}
	factory.Start(ctx.Done())
	m.log.Info("cloud controllers started", "controllers", strings.Join(started, ","))
	<-ctx.Done()
	m.log.Info("stopping cloud controllers")
	return nil
}

// build constructs one controller and returns how to run it, or nil when the
// cloud cannot serve it (logged, as upstream does: not fatal).
func (m *Manager) build(ctx context.Context, name string, b clientbuilder.SimpleControllerClientBuilder, f informers.SharedInformerFactory) (func(), error) {
	nodes := f.Core().V1().Nodes()
	switch name {
	case Service:
		client, err := b.Client("service-controller")
		if err != nil {
			return nil, err
		}
		c, err := servicecontroller.New(m.cloud, client, f.Core().V1().Services(), nodes, m.cfg.ClusterName, utilfeature.DefaultFeatureGate)
		if err != nil {
			m.log.Warn("service controller not started", "err", err)
			return nil, nil
		}
		return func() { c.Run(ctx, m.cfg.ConcurrentServiceSyncs, m.metrics) }, nil
	case Node:
		client, err := b.Client("node-controller")
		if err != nil {
			return nil, err
		}
		workers := int32(m.cfg.ConcurrentNodeSyncs)
		c, err := nodecontroller.NewCloudNodeController(nodes, client, m.cloud, m.cfg.NodeStatusUpdateFrequency, workers, workers)
		if err != nil {
			m.log.Warn("cloud node controller not started", "err", err)
			return nil, nil
		}
		return func() { c.RunWithContext(ctx, m.metrics) }, nil
	case NodeLifecycle:
		client, err := b.Client("node-controller")
		if err != nil {
			return nil, err
		}
		c, err := nodelifecyclecontroller.NewCloudNodeLifecycleController(nodes, client, m.cloud, m.cfg.NodeMonitorPeriod)
		if err != nil {
			m.log.Warn("cloud node lifecycle controller not started", "err", err)
			return nil, nil
		}
		return func() { c.Run(ctx, m.metrics) }, nil
	case Route:
		routes, ok := m.cloud.Routes()
		if !ok {
			m.log.Warn("route controller not started: the cloud provider does not support routes")
			return nil, nil
		}
		client, err := b.Client("route-controller")
		if err != nil {
			return nil, err
		}
		c, err := routecontroller.New(routes, client, nodes, m.cfg.ClusterName, m.cfg.ClusterCIDRs)
		if err != nil {
			return nil, err
		}
		return func() { c.Run(ctx, m.cfg.RouteReconciliationPeriod, m.metrics) }, nil
	}
	return nil, fmt.Errorf("unknown controller %q", name)
}
