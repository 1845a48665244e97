package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/nodestatusd/internal/nodelease"
	"github.com/microlet/microlet/services/nodestatusd/internal/registration"
	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
	"github.com/microlet/microlet/services/nodestatusd/internal/sources"
	"github.com/microlet/microlet/services/nodestatusd/internal/statusupdate"
)

// Timing holds the intervals, with the kubelet's defaults from DefaultTiming.
type Timing struct {
	// StatusUpdateFrequency is --node-status-update-frequency (10 s).
	StatusUpdateFrequency time.Duration
	// StatusReportFrequency is --node-status-report-frequency (5 min).
	StatusReportFrequency time.Duration
	// LeaseDurationSeconds is --node-lease-duration-seconds (40).
	LeaseDurationSeconds int32
	// LeaseRenewInterval is a quarter of the duration unless set.
	LeaseRenewInterval time.Duration
	// FastStatusTimeout bounds the startup loop that reports Ready early (120 s).
	FastStatusTimeout time.Duration
}

// DefaultTiming is the kubelet's.
func DefaultTiming() Timing {
	return Timing{
		StatusUpdateFrequency: 10 * time.Second,
		StatusReportFrequency: statusupdate.DefaultReportFrequency,
		LeaseDurationSeconds:  nodelease.DefaultDurationSeconds,
		LeaseRenewInterval:    nodelease.RenewInterval(nodelease.DefaultDurationSeconds),
		FastStatusTimeout:     statusupdate.FastTimeout,
	}
}

// HeartbeatTimeout is the kubelet's: min(10 s, lease duration).
func HeartbeatTimeout(leaseSeconds int32) time.Duration {
	return min(10*time.Second, time.Duration(leaseSeconds)*time.Second)
}

// SharedConfig describes what the agents of one process share.
type SharedConfig struct {
	// RestConfig is nil in standalone mode.
	RestConfig *rest.Config
	// QPS and Burst limit the registration client (the kubelet's 50/100)
	// of each node.
	QPS   float32
	Burst int
	// Nodes is how many agents share the clients (1 but in nodestatussim).
	// Every kubelet has its own registration client; the shared one gets
	// Nodes times the budget so N simulated nodes are not throttled like
	// one.
	Nodes int
	// NodeName selects the informer's field selector for one node; with
	// NodeSelector set (nodestatussim) the informer watches all matching nodes.
	NodeName     string
	NodeSelector labels.Selector
	Timing       Timing
	Clock        clock.WithTicker
	Log          *slog.Logger
	// Inputs is the template of every agent's setter inputs; Hostname is
	// per agent.
	Inputs setters.Inputs
}

// Shared is what agents share.
type Shared struct {
	cfg       SharedConfig
	client    kubernetes.Interface
	heartbeat kubernetes.Interface
	closeIdle func()
	lister    corelisters.NodeLister
}

// NewShared builds the clients (the heartbeat one unthrottled, with its
// own connections that are closed after repeated failures) and starts the
// Node informer. In standalone mode (no RestConfig) it builds none.
func NewShared(ctx context.Context, cfg SharedConfig) (*Shared, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	sh := &Shared{cfg: cfg, closeIdle: func() {}}
	if cfg.RestConfig == nil {
		return sh, nil
	}
	rc := rest.CopyConfig(cfg.RestConfig)
	nodes := max(cfg.Nodes, 1)
	rc.QPS, rc.Burst = cfg.QPS*float32(nodes), cfg.Burst*nodes
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	hc := rest.CopyConfig(cfg.RestConfig)
	// Heartbeats must never queue behind other requests: no client-side
	// rate limit, and a timeout shorter than the lease.
	hc.QPS = -1
	hc.RateLimiter = nil
	hc.Timeout = HeartbeatTimeout(cfg.Timing.LeaseDurationSeconds)
	dialer := connrotation.NewDialer((&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext)
	hc.Dial = dialer.DialContext
	// answered is when the API server last answered a heartbeat request
	// (any HTTP status): the shared connection was alive then.
	var answered atomic.Int64
	hc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil {
				answered.Store(cfg.Clock.Now().UnixNano())
			}
			return resp, err
		})
	})
	heartbeat, err := kubernetes.NewForConfig(hc)
	if err != nil {
		return nil, fmt.Errorf("heartbeat client: %w", err)
	}
	sh.client, sh.heartbeat = client, heartbeat
	sh.closeIdle = throttle(cfg.Clock, hc.Timeout, dialer.CloseAll)
	if nodes > 1 {
		// Simulated nodes share the heartbeat connections. One node's
		// repeated failure then says nothing about the connection while
		// others get answers on it, and closing it would fail every
		// node's request in flight, whose retries would close it again:
		// under load that loop starves everybody. Close only when no
		// request was answered for a whole heartbeat timeout.
		closeAll := sh.closeIdle
		sh.closeIdle = func() {
			if cfg.Clock.Since(time.Unix(0, answered.Load())) >= hc.Timeout {
				closeAll()
			}
		}
	}

	var opt informers.SharedInformerOption
	if cfg.NodeSelector != nil {
		sel := cfg.NodeSelector.String()
		opt = informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel })
	} else {
		sel := fields.OneTermEqualSelector(metav1.ObjectNameField, cfg.NodeName).String()
		opt = informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = sel })
	}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, opt, informers.WithTransform(dropManagedFields))
	inf := f.Core().V1().Nodes()
	sh.lister = inf.Lister()
	f.Start(ctx.Done())
	return sh, nil
}

// dropManagedFields is the informer's transform: the cached Nodes are read
// for the status computation and as the original of the status patch, which
// never touches managed fields; without them every cached Node (one per
// simulated node) is smaller and cheaper to copy.
func dropManagedFields(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.ManagedFields = nil
	}
	return obj, nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Name is the node's name.
func (a *Agent) Name() string { return a.name }

// throttle runs f at most once per interval. The heartbeat connections are
// shared by every simulated node; without this one node's repeated failure
// would cut the requests of all others, whose failures would cut them again.
func throttle(clk clock.PassiveClock, interval time.Duration, f func()) func() {
	var mu sync.Mutex
	var last time.Time
	return func() {
		mu.Lock()
		now := clk.Now()
		if !last.IsZero() && now.Sub(last) < interval {
			mu.Unlock()
			return
		}
		last = now
		mu.Unlock()
		f()
	}
}

// Standalone reports whether there is no API server.
func (s *Shared) Standalone() bool { return s.client == nil }

// Client is the registration client (nil standalone).
func (s *Shared) Client() kubernetes.Interface { return s.client }

// Agent runs one node. Its work is done in steps (register, renew the
// Lease, sync the status, the startup loop) that a Runner schedules, so
// thousands of simulated agents share a few workers.
type Agent struct {
	name    string
	sh      *Shared
	reg     registration.Options
	in      setters.Inputs
	updater *statusupdate.Updater
	lease   *nodelease.Renewer
	pub     *Published

	// poke asks the Runner for a status sync now; set by NewRunner.
	poke atomic.Pointer[func()]
	// statusGen is the generation of the live chain of status syncs;
	// started is set once the start step is done.
	statusGen atomic.Uint32
	started   atomic.Bool

	// fastUntil ends the startup loop; only the Runner's steps touch it,
	// one at a time.
	fastUntil time.Time
	// standalone is the Node computed last without an API server.
	standalone *corev1.Node

	mu         sync.Mutex
	registered int
}

// New returns the agent of one node.
func New(name string, sh *Shared, reg registration.Options) *Agent {
	a := &Agent{name: name, sh: sh, reg: reg, pub: newPublished()}
	a.in = sh.cfg.Inputs
	if reg.Hostname != "" {
		a.in.Hostname = reg.Hostname
	} else {
		a.in.Hostname = name
	}
	if a.in.Now == nil {
		a.in.Now = sh.cfg.Clock.Now
	}
	opts := []statusupdate.Option{
		statusupdate.WithClock(sh.cfg.Clock),
		statusupdate.WithReportFrequency(sh.cfg.Timing.StatusReportFrequency),
		statusupdate.WithLogger(sh.cfg.Log),
		statusupdate.WithRepeatedFailure(sh.closeIdle),
		statusupdate.WithOnPatched(a.published),
		statusupdate.WithLabels(a.requiredLabels()),
	}
	a.updater = statusupdate.New(name, sh.heartbeat, sh.lister, setters.Defaults(&a.in), opts...)
	if !sh.Standalone() {
		a.lease = nodelease.New(sh.cfg.Clock, sh.heartbeat.CoordinationV1().Leases(corev1.NamespaceNodeLease), name,
			sh.cfg.Timing.LeaseDurationSeconds, sh.lister, sh.closeIdle, sh.cfg.Log)
	}
	return a
}

// Published is the agent's latest Node.
func (a *Agent) Published() *Published { return a.pub }

// Updater is the agent's status updater (tests drive it directly).
func (a *Agent) Updater() *statusupdate.Updater { return a.updater }

// Registrations counts successful registrations (re-registration after a
// deletion adds one).
func (a *Agent) Registrations() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.registered
}

// InitialNode is the Node this agent registers, with cloud metadata if any.
func (a *Agent) InitialNode(ctx context.Context) *corev1.Node {
	var md sources.CloudState
	if a.in.Cloud != nil {
		md = a.in.Cloud(ctx)
	}
	return registration.InitialNode(a.reg, md.Metadata, a.log())
}

// requiredLabels are the default labels kept on the Node (drift repaired
// by every status sync, not only at registration).
func (a *Agent) requiredLabels() map[string]string {
	n := registration.InitialNode(a.reg, nil, nil)
	out := map[string]string{}
	for _, k := range registration.DefaultLabelKeys {
		if v, ok := n.Labels[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Poke asks for a sync now (a reporter changed a condition) instead of at
// the next period. Before the agent runs it does nothing.
func (a *Agent) Poke() {
	if f := a.poke.Load(); f != nil {
		(*f)()
	}
}

// log is the shared logger with the node's name, made when needed: a
// logger per simulated node costs memory for lines rarely written.
func (a *Agent) log() *slog.Logger { return a.sh.cfg.Log.With("node", a.name) }

// published keeps a Node the API server returned for GetNode and
// WatchNode, without its managed fields (nobody here reads them).
func (a *Agent) published(n *corev1.Node) {
	n.ManagedFields = nil
	a.pub.Set(n)
}

// start registers the Node (retrying with backoff until it is created or
// ctx ends) and arms the startup loop. Standalone it computes the first
// Node instead.
func (a *Agent) start(ctx context.Context) error {
	if a.sh.Standalone() {
		a.syncStandalone(ctx)
		return nil
	}
	if err := a.register(ctx); err != nil {
		return err
	}
	a.fastUntil = a.sh.cfg.Clock.Now().Add(a.sh.cfg.Timing.FastStatusTimeout)
	return nil
}

// renewLease is one renewal; it returns the wait before the next one.
func (a *Agent) renewLease(ctx context.Context) time.Duration {
	if d := a.lease.Renew(ctx); d > 0 {
		return d
	}
	return wait.Jitter(a.sh.cfg.Timing.LeaseRenewInterval, JitterFactor)
}

// fastStep is one pass of the startup loop that reports Ready as soon as
// it is true; it reports whether the loop is over (Ready patched, or the
// timeout passed).
func (a *Agent) fastStep(ctx context.Context) bool {
	if a.updater.FastOnce(ctx) || ctx.Err() != nil {
		return true
	}
	if !a.sh.cfg.Clock.Now().Before(a.fastUntil) {
		a.log().Warn("node did not become ready in time after startup", "timeout", a.sh.cfg.Timing.FastStatusTimeout)
		return true
	}
	return false
}

func (a *Agent) register(ctx context.Context) error {
	if err := registration.Register(ctx, a.sh.client, a.InitialNode, a.log()); err != nil {
		return err
	}
	a.mu.Lock()
	a.registered++
	a.mu.Unlock()
	return nil
}

func (a *Agent) sync(ctx context.Context) {
	err := a.updater.Update(ctx)
	switch {
	case err == nil, ctx.Err() != nil:
	case apierrors.IsNotFound(err) || isNodeNotFound(err):
		a.log().Warn("node was deleted; registering it again")
		if err := a.register(ctx); err == nil {
			if err := a.updater.Update(ctx); err != nil && ctx.Err() == nil {
				a.log().Warn("status after re-registration", "err", err)
			}
		}
	default:
		a.log().Error("node status not updated", "err", err)
	}
}

func isNodeNotFound(err error) bool {
	var se apierrors.APIStatus
	return errors.As(err, &se) && se.Status().Code == 404
}

// syncStandalone computes the Node and publishes it when it changed.
func (a *Agent) syncStandalone(ctx context.Context) {
	first := a.standalone == nil
	if first {
		a.standalone = a.InitialNode(ctx)
		a.standalone.CreationTimestamp = metav1.NewTime(a.sh.cfg.Clock.Now())
	}
	next, changed := a.updater.Compute(ctx, a.standalone)
	if changed || first {
		a.pub.Set(next)
	}
	a.standalone = next
}

// Labels returns a copy of the required labels (for tests and docs).
func (a *Agent) Labels() map[string]string { return maps.Clone(a.requiredLabels()) }
