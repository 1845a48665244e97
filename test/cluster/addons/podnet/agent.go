package podnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config is what one node's agent needs.
type Config struct {
	// NodeName is this node's Node object.
	NodeName string
	// ClusterCIDR is the whole pod network (10.244.0.0/16).
	ClusterCIDR string
	// CNIConfDir is where the conflist goes (/etc/cni/net.d).
	CNIConfDir string
	// Resync re-applies everything this often even without Node events, so
	// a route or rule someone removed comes back. Zero: 1 minute.
	Resync time.Duration
}

// Validate reports every bad field at once.
func (c Config) Validate() field.ErrorList {
	var errs field.ErrorList
	if c.NodeName == "" {
		errs = append(errs, field.Required(field.NewPath("nodeName"), "the Node this agent runs on"))
	}
	if p, err := netip.ParsePrefix(c.ClusterCIDR); err != nil || p != p.Masked() || !p.Addr().Is4() {
		errs = append(errs, field.Invalid(field.NewPath("clusterCIDR"), c.ClusterCIDR, "must be an IPv4 network CIDR such as 10.244.0.0/16"))
	}
	if c.CNIConfDir == "" {
		errs = append(errs, field.Required(field.NewPath("cniConfDir"), "the CNI configuration directory"))
	}
	if c.Resync < 0 {
		errs = append(errs, field.Invalid(field.NewPath("resync"), c.Resync, "must not be negative"))
	}
	return errs
}

// RouteTable is where routes go; NetlinkRoutes in production.
type RouteTable interface {
	List() ([]Route, error)
	Replace(Route) error
	Delete(Route) error
}

// Masquerader installs the masquerade rules; Iptables in production.
type Masquerader interface {
	EnsureMasquerade(ctx context.Context, cluster netip.Prefix) error
}

// Agent keeps one node's CNI configuration, routes and masquerade rules in
// line with the cluster's Nodes.
type Agent struct {
	cfg     Config
	cluster netip.Prefix
	routes  RouteTable
	masq    Masquerader
	log     *slog.Logger

	factory informers.SharedInformerFactory
	nodes   corelisters.NodeLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
}

// Option sets an optional part of the Agent.
type Option func(*Agent)

// WithRouteTable replaces the netlink route table (tests).
func WithRouteTable(r RouteTable) Option { return func(a *Agent) { a.routes = r } }

// WithMasquerader replaces iptables (tests, or a node without iptables).
func WithMasquerader(m Masquerader) Option { return func(a *Agent) { a.masq = m } }

// WithLogger sets the logger; default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(a *Agent) { a.log = l } }

// New builds the agent and its Node informer; Run starts them.
func New(cfg Config, client kubernetes.Interface, opts ...Option) (*Agent, error) {
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("podnet config: %w", errs.ToAggregate())
	}
	if cfg.Resync == 0 {
		cfg.Resync = time.Minute
	}
	a := &Agent{
		cfg:     cfg,
		cluster: netip.MustParsePrefix(cfg.ClusterCIDR),
		routes:  NetlinkRoutes{},
		masq:    Iptables{},
		log:     slog.Default(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "podnet"}),
	}
	for _, o := range opts {
		o(a)
	}
	a.factory = informers.NewSharedInformerFactory(client, cfg.Resync)
	inf := a.factory.Core().V1().Nodes()
	a.nodes = inf.Lister()
	a.synced = inf.Informer().HasSynced
	// Every change to any Node may change a route; one key, one sync of
	// the whole node state, so bursts of events collapse into one pass.
	enqueue := func(any) { a.queue.Add(syncKey) }
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	return a, nil
}

const syncKey = "node-state"

// Run syncs until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	defer a.queue.ShutDown()
	a.factory.Start(ctx.Done())
	defer a.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		return fmt.Errorf("podnet: node informer did not sync: %w", ctx.Err())
	}
	a.log.Info("podnet started", "node", a.cfg.NodeName, "clusterCIDR", a.cluster)
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	a.queue.Add(syncKey)
	for {
		key, quit := a.queue.Get()
		if quit {
			return nil
		}
		err := a.Sync(ctx)
		if err != nil {
			a.log.Error("podnet sync failed, retrying", "err", err)
			a.queue.AddRateLimited(key)
		} else {
			a.queue.Forget(key)
		}
		a.queue.Done(key)
	}
}

// Sync applies the current Node state once: conflist, routes, masquerade.
// Each part runs even if an earlier one failed; the errors are joined.
func (a *Agent) Sync(ctx context.Context) error {
	nodes, err := a.nodes.List(labels.Everything())
	if err != nil {
		return err
	}
	var errs []error
	self, err := a.nodes.Get(a.cfg.NodeName)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("own node %s: %w", a.cfg.NodeName, err))
	default:
		if err := a.syncConflist(self); err != nil {
			errs = append(errs, err)
		}
	}
	if err := a.syncRoutes(DesiredRoutes(nodes, a.cfg.NodeName, a.cluster)); err != nil {
		errs = append(errs, err)
	}
	if err := a.masq.EnsureMasquerade(ctx, a.cluster); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (a *Agent) syncConflist(self *corev1.Node) error {
	cidr, err := SelfPodCIDR(self, a.cluster)
	if err != nil {
		return err
	}
	data, err := Conflist(cidr.String())
	if err != nil {
		return err
	}
	changed, err := WriteConflist(a.cfg.CNIConfDir, data)
	if err != nil {
		return fmt.Errorf("write conflist: %w", err)
	}
	if changed {
		a.log.Info("wrote CNI conflist", "dir", a.cfg.CNIConfDir, "podCIDR", cidr)
	}
	return nil
}

func (a *Agent) syncRoutes(desired []Route) error {
	current, err := a.routes.List()
	if err != nil {
		return err
	}
	add, del := DiffRoutes(current, desired)
	var errs []error
	for _, r := range del {
		if err := a.routes.Delete(r); err != nil {
			errs = append(errs, err)
			continue
		}
		a.log.Info("route removed", "route", r.String())
	}
	for _, r := range add {
		if err := a.routes.Replace(r); err != nil {
			errs = append(errs, err)
			continue
		}
		a.log.Info("route set", "route", r.String())
	}
	return errors.Join(errs...)
}
