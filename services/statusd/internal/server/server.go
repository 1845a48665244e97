package server

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/mirror"
	"github.com/microlet/microlet/services/statusd/internal/store"
	"github.com/microlet/microlet/services/statusd/internal/syncer"
)

// Config is statusd's configuration.
type Config struct {
	service.Common `yaml:",inline"`

	KubeAPIQPS      float32       `yaml:"kube_api_qps" flag:"kube-api-qps" usage:"API requests per second to the API server; negative for no client-side limit"`
	KubeAPIBurst    int           `yaml:"kube_api_burst" flag:"kube-api-burst" usage:"burst of API requests above kube_api_qps"`
	SyncWorkers     int           `yaml:"sync_workers" flag:"sync-workers" usage:"pods synced to the API server in parallel"`
	ReconcilePeriod time.Duration `yaml:"reconcile_period" flag:"reconcile-period" usage:"period of the full comparison with the API server"`
	MirrorPods      bool          `yaml:"mirror_pods" flag:"mirror-pods" usage:"create mirror pods for static pods from podconfig (connected mode only)"`
	MaxStatusBytes  int           `yaml:"max_status_bytes" flag:"max-status-bytes" usage:"largest pod status (protobuf-encoded bytes) SetPodStatus takes; larger ones are refused with InvalidArgument"`
}

// Server is the statusd service.
type Server struct {
	cfg Config
	api *api
	// mirror is set in connected mode with mirror pods on; a reclaimed
	// static pod pokes it, so its mirror pod goes without waiting.
	mirror atomic.Pointer[mirror.Manager]
}

// New returns the service with its defaults (the kubelet's 50/100 QPS).
func New() *Server {
	return &Server{cfg: Config{
		Common:          service.DefaultCommon(),
		KubeAPIQPS:      50,
		KubeAPIBurst:    100,
		SyncWorkers:     syncer.DefaultWorkers,
		ReconcilePeriod: syncer.DefaultReconcilePeriod,
		MirrorPods:      true,
		MaxStatusBytes:  DefaultMaxStatusBytes,
	}}
}

// Name implements service.Service.
func (s *Server) Name() string { return components.Statusd }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return &s.cfg }

// Register implements service.Service: it checks the settings and registers
// the API, which answers Unavailable until Run has loaded the store.
func (s *Server) Register(env *service.Env) error {
	c := &s.cfg
	switch {
	case c.KubeAPIQPS == 0:
		return errors.New("kube_api_qps must not be 0 (negative disables the limit)")
	case c.KubeAPIQPS > 0 && c.KubeAPIBurst <= 0:
		return fmt.Errorf("kube_api_burst must be positive with kube_api_qps %v, got %d", c.KubeAPIQPS, c.KubeAPIBurst)
	case c.SyncWorkers <= 0:
		return fmt.Errorf("sync_workers must be positive, got %d", c.SyncWorkers)
	case c.ReconcilePeriod <= 0:
		return fmt.Errorf("reconcile_period must be positive, got %s", c.ReconcilePeriod)
	case c.MaxStatusBytes <= 0:
		return fmt.Errorf("max_status_bytes must be positive, got %d", c.MaxStatusBytes)
	case c.DataDir == "":
		return errors.New("data_dir must be set: accepted statuses are stored there")
	}
	s.api = &api{log: env.Log, maxStatus: c.MaxStatusBytes}
	statusdv1.RegisterStatusServiceServer(env.Server.GRPC(), s.api)
	return nil
}

// DBPath is where statusd keeps its store inside the data directory.
func DBPath(dataDir string) string { return filepath.Join(dataDir, "statusd.db") }

// Run implements service.Service.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	st, err := store.Open(DBPath(s.cfg.DataDir))
	if err != nil {
		return err
	}
	if aside := st.MovedAside(); aside != "" {
		env.Log.Warn("status store was unreadable: moved aside, starting empty (the node reports every pod's status again)", "db", DBPath(s.cfg.DataDir), "moved_to", aside)
	}
	c := cache.New(st, cache.WithOnChange(func(uid string) {
		if x := s.api.syncer.Load(); x != nil {
			x.Enqueue(uid)
		}
		if m := s.mirror.Load(); m != nil {
			m.Poke()
		}
	}))
	n, err := c.Load()
	if err != nil {
		_ = st.Close()
		return fmt.Errorf("load %s: %w", DBPath(s.cfg.DataDir), err)
	}
	for _, q := range st.Quarantined() {
		env.Log.Warn("stored status unreadable: quarantined (the node reports it again)", "pod_uid", q.UID, "reason", q.Reason, "db", DBPath(s.cfg.DataDir))
	}
	env.Log.Info("statuses loaded", "pods", n, "quarantined", len(st.Quarantined()), "db", DBPath(s.cfg.DataDir))
	s.api.open(c)

	var wg sync.WaitGroup
	qps := s.cfg.KubeAPIQPS
	client, _, err := kubeclient.Clientset(s.cfg.Kubeconfig, components.Statusd, qps, s.cfg.KubeAPIBurst)
	switch {
	case errors.Is(err, kubeclient.ErrStandalone):
		env.Log.Info("standalone: statuses are kept and served locally only")
	case err != nil:
		s.api.close()
		_ = st.Close()
		return err
	default:
		s.runConnected(ctx, env, client, c, &wg)
	}
	env.Ready()
	<-ctx.Done()
	wg.Wait()
	s.api.close() // waits for calls in flight, so the store closes after its last write
	return st.Close()
}

func (s *Server) runConnected(ctx context.Context, env *service.Env, client kubernetes.Interface, c *cache.Cache, wg *sync.WaitGroup) {
	node := s.cfg.NodeName
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	podInformer := factory.Core().V1().Pods().Informer()
	x := syncer.New(client, c, podInformer,
		syncer.WithWorkers(s.cfg.SyncWorkers), syncer.WithReconcilePeriod(s.cfg.ReconcilePeriod),
		syncer.WithLogger(env.Log.With("part", "syncer")), syncer.WithRegisterer(env.Registry))
	s.api.syncer.Store(x)
	var m *mirror.Manager
	if s.cfg.MirrorPods {
		cc, err := grpcclient.Dial(s.cfg.Endpoint(components.PodConfig))
		if err != nil {
			env.Log.Error("mirror pods disabled: podconfig endpoint", "err", err)
		} else {
			m = mirror.New(client, podconfigv1.NewPodConfigServiceClient(cc), node, podInformer,
				mirror.WithLogger(env.Log.With("part", "mirror")), mirror.WithRegisterer(env.Registry), mirror.WithResyncPeriod(s.cfg.ReconcilePeriod),
				mirror.WithRunning(c.StaticPodRunning))
			s.mirror.Store(m)
			wg.Go(func() {
				<-ctx.Done()
				_ = cc.Close()
			})
		}
	}
	factory.Start(ctx.Done())
	wg.Go(func() { x.Run(ctx) })
	if m != nil {
		wg.Go(func() { m.Run(ctx) })
	}
	wg.Go(func() {
		<-ctx.Done()
		factory.Shutdown()
	})
	env.Log.Info("connected: syncing statuses to the API server", "node", node, "qps", s.cfg.KubeAPIQPS, "burst", s.cfg.KubeAPIBurst, "workers", s.cfg.SyncWorkers, "mirrorPods", m != nil)
}
