package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/cloudsyncd/internal/cloud"
	"github.com/microlet/microlet/services/cloudsyncd/internal/controllers"

	// Workqueue depth, latency and retries of the controllers' queues, in
	// legacyregistry, as cloud-controller-manager exports them.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

// ControllerConfig is the controller mode's part of the configuration. With
// controllers empty cloudsyncd runs in node mode only.
type ControllerConfig struct {
	Controllers []string `yaml:"controllers" flag:"controllers" usage:"cluster-wide cloud controllers to run: service, node, node-lifecycle, route (empty: node mode)"`
	ClusterName string   `yaml:"cluster_name" flag:"cluster-name" usage:"controller mode: cluster name handed to the load balancer and route calls"`
	ClusterCIDR string   `yaml:"cluster_cidr" flag:"cluster-cidr" usage:"controller mode: pod CIDR(s) of the cluster, comma-separated, one per IP family; required by the route controller"`

	NodeStatusUpdateFrequency time.Duration `yaml:"node_status_update_frequency" flag:"node-status-update-frequency" usage:"controller mode: how often initialised Nodes' addresses and labels are refreshed from the cloud"`
	NodeMonitorPeriod         time.Duration `yaml:"node_monitor_period" flag:"node-monitor-period" usage:"controller mode: how often not-ready Nodes are checked for shutdown or deleted instances"`
	RouteReconciliationPeriod time.Duration `yaml:"route_reconciliation_period" flag:"route-reconciliation-period" usage:"controller mode: how often cloud routes are reconciled"`
	MinResyncPeriod           time.Duration `yaml:"min_resync_period" flag:"min-resync-period" usage:"controller mode: informer resync, jittered up to twice this"`
	ConcurrentServiceSyncs    int           `yaml:"concurrent_service_syncs" flag:"concurrent-service-syncs" usage:"controller mode: Services synced concurrently"`
	ConcurrentNodeSyncs       int           `yaml:"concurrent_node_syncs" flag:"concurrent-node-syncs" usage:"controller mode: Nodes initialised and updated concurrently"`

	LeaderElect                  bool          `yaml:"leader_elect" flag:"leader-elect" usage:"controller mode: act only while holding the Lease, so replicas can stand by"`
	LeaderElectLeaseDuration     time.Duration `yaml:"leader_elect_lease_duration" flag:"leader-elect-lease-duration" usage:"controller mode: how long standbys wait after the last renewal before taking the Lease"`
	LeaderElectRenewDeadline     time.Duration `yaml:"leader_elect_renew_deadline" flag:"leader-elect-renew-deadline" usage:"controller mode: how long the leader keeps retrying a renewal before it gives up leading"`
	LeaderElectRetryPeriod       time.Duration `yaml:"leader_elect_retry_period" flag:"leader-elect-retry-period" usage:"controller mode: wait between attempts to acquire or renew the Lease"`
	LeaderElectResourceNamespace string        `yaml:"leader_elect_resource_namespace" flag:"leader-elect-resource-namespace" usage:"controller mode: namespace of the Lease"`
	LeaderElectResourceName      string        `yaml:"leader_elect_resource_name" flag:"leader-elect-resource-name" usage:"controller mode: name of the Lease"`
}

func defaultControllerConfig() ControllerConfig {
	d := controllers.DefaultConfig()
	return ControllerConfig{
		ClusterName:                  d.ClusterName,
		NodeStatusUpdateFrequency:    d.NodeStatusUpdateFrequency,
		NodeMonitorPeriod:            d.NodeMonitorPeriod,
		RouteReconciliationPeriod:    d.RouteReconciliationPeriod,
		MinResyncPeriod:              d.MinResyncPeriod,
		ConcurrentServiceSyncs:       d.ConcurrentServiceSyncs,
		ConcurrentNodeSyncs:          d.ConcurrentNodeSyncs,
		LeaderElect:                  d.LeaderElection.Enabled,
		LeaderElectLeaseDuration:     d.LeaderElection.LeaseDuration,
		LeaderElectRenewDeadline:     d.LeaderElection.RenewDeadline,
		LeaderElectRetryPeriod:       d.LeaderElection.RetryPeriod,
		LeaderElectResourceNamespace: d.LeaderElection.Namespace,
		LeaderElectResourceName:      d.LeaderElection.Name,
	}
}

// errControllerMode answers the node-mode API in controller mode: this
// process serves the cluster, the node's own cloudsyncd serves the node.
var errControllerMode = status.Error(codes.FailedPrecondition,
	"cloudsyncd runs in controller mode (controllers is set): node addresses come from the cloudsyncd running on the node")

// controllerSettings turns the keys into the controllers' config; errors name
// the key at fault.
func (c *ControllerConfig) controllerSettings() (controllers.Config, error) {
	var out controllers.Config
	names, err := controllers.ParseNames(c.Controllers)
	if err != nil {
		return out, fmt.Errorf("controllers: %w", err)
	}
	var errs field.ErrorList
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"node_status_update_frequency", c.NodeStatusUpdateFrequency},
		{"node_monitor_period", c.NodeMonitorPeriod},
		{"route_reconciliation_period", c.RouteReconciliationPeriod},
		{"min_resync_period", c.MinResyncPeriod},
		{"leader_elect_lease_duration", c.LeaderElectLeaseDuration},
		{"leader_elect_renew_deadline", c.LeaderElectRenewDeadline},
		{"leader_elect_retry_period", c.LeaderElectRetryPeriod},
	} {
		errs = append(errs, config.Positive(field.NewPath(d.key), d.v)...)
	}
	errs = append(errs, config.Positive(field.NewPath("concurrent_service_syncs"), c.ConcurrentServiceSyncs)...)
	errs = append(errs, config.Positive(field.NewPath("concurrent_node_syncs"), c.ConcurrentNodeSyncs)...)
	if err := config.Join(errs); err != nil {
		return out, err
	}
	if c.LeaderElect {
		if c.LeaderElectLeaseDuration <= c.LeaderElectRenewDeadline {
			return out, fmt.Errorf("leader_elect_lease_duration %s: must be longer than leader_elect_renew_deadline %s", c.LeaderElectLeaseDuration, c.LeaderElectRenewDeadline)
		}
		if float64(c.LeaderElectRenewDeadline) <= 1.2*float64(c.LeaderElectRetryPeriod) {
			return out, fmt.Errorf("leader_elect_renew_deadline %s: must be longer than 1.2 × leader_elect_retry_period %s", c.LeaderElectRenewDeadline, c.LeaderElectRetryPeriod)
		}
		if c.LeaderElectResourceNamespace == "" || c.LeaderElectResourceName == "" {
			return out, errors.New("leader_elect_resource_namespace, leader_elect_resource_name: must not be empty")
		}
	}
	out = controllers.DefaultConfig()
	out.Controllers = names
	out.ClusterName = c.ClusterName
	if c.ClusterCIDR != "" {
		if out.ClusterCIDRs, err = controllers.ParseClusterCIDRs(c.ClusterCIDR); err != nil {
			return out, fmt.Errorf("cluster_cidr %q: %w", c.ClusterCIDR, err)
		}
	}
	if out.Has(controllers.Route) && len(out.ClusterCIDRs) == 0 {
		return out, errors.New("cluster_cidr: required by the route controller")
	}
	out.NodeStatusUpdateFrequency = c.NodeStatusUpdateFrequency
	out.NodeMonitorPeriod = c.NodeMonitorPeriod
	out.RouteReconciliationPeriod = c.RouteReconciliationPeriod
	out.MinResyncPeriod = c.MinResyncPeriod
	out.ConcurrentServiceSyncs = c.ConcurrentServiceSyncs
	out.ConcurrentNodeSyncs = c.ConcurrentNodeSyncs
	out.LeaderElection = controllers.LeaderElection{
		Enabled:       c.LeaderElect,
		Namespace:     c.LeaderElectResourceNamespace,
		Name:          c.LeaderElectResourceName,
		LeaseDuration: c.LeaderElectLeaseDuration,
		RenewDeadline: c.LeaderElectRenewDeadline,
		RetryPeriod:   c.LeaderElectRetryPeriod,
	}
	return out, nil
}

// registerControllers prepares controller mode: the settings, the
// credential (cloud_kubeconfig, else kubeconfig) and the cluster-wide cloud.
// Its errors are one-line exits with code 2.
func (s *Server) registerControllers(env *service.Env) error {
	settings, err := s.cfg.controllerSettings()
	if err != nil {
		return err
	}
	key, kc := "cloud_kubeconfig", s.cfg.CloudKubeconfig
	if kc == "" {
		key, kc = "kubeconfig", s.cfg.Kubeconfig
	}
	// The same QPS and burst as cloud-controller-manager.
	cs, rc, err := kubeclient.Clientset(kc, "cloudsyncd", 20, 30)
	if errors.Is(err, kubeclient.ErrStandalone) {
		return errors.New("controllers: need kubeconfig or cloud_kubeconfig (the controllers work on the API server)")
	}
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	c, err := cloud.New(s.cfg.Cloud(), cloud.WithKubeClient(cs), cloud.WithLogger(env.Log))
	if err != nil {
		return err
	}
	m, err := controllers.New(settings, rc, c,
		controllers.WithLogger(env.Log),
		controllers.WithRegistry(env.Registry))
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("controllers: %w", err)
	}
	s.cloud, s.ctl = c, m
	env.Gather(upstreamMetrics)
	return nil
}

// upstreamMetrics serves what the upstream controllers register in
// component-base's legacyregistry (service_controller_*, cloud node and
// route metrics, workqueue depth and retries), minus its own Go and process
// collectors, which the service's registry already has.
var upstreamMetrics = prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool {
		return strings.HasPrefix(mf.GetName(), "go_") || strings.HasPrefix(mf.GetName(), "process_")
	}), err
})

// runControllers is Run in controller mode. The process is SERVING whether it
// leads or stands by; leadership shows in the logs and in cloudsyncd_leader.
// Losing the Lease ends Run with an error, so the process exits 1 and its
// supervisor (microlet, systemd, the kubelet) restarts it as a candidate.
func (s *Server) runControllers(ctx context.Context, env *service.Env) error {
	defer func() {
		if err := s.cloud.Close(); err != nil {
			env.Log.Warn("closing the cloud provider", "err", err)
		}
	}()
	env.Ready()
	return s.ctl.Run(ctx)
}
