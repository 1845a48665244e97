package controllers

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	netutils "k8s.io/utils/net"
)

// Controller names accepted by ParseNames.
const (
	// Service is the ServiceController: load balancers for Services of type LoadBalancer.
	Service = "service"
	// Node is the CloudNodeController: cloud initialisation of every Node and
	// the periodic address update.
	Node = "node"
	// NodeLifecycle is the CloudNodeLifecycleController: shutdown taint, and
	// deletion of Nodes whose instance is gone.
	NodeLifecycle = "node-lifecycle"
	// Route is the RouteController: cloud routes for the Nodes' pod CIDRs.
	Route = "route"
)

// Names lists the known controllers in the order they start.
var Names = []string{Service, Node, NodeLifecycle, Route}

// Defaults, as k8s.io/cloud-provider and kube-controller-manager set them.
const (
	DefaultLeaseDuration             = 15 * time.Second
	DefaultRenewDeadline             = 10 * time.Second
	DefaultRetryPeriod               = 2 * time.Second
	DefaultLeaseNamespace            = "kube-system"
	DefaultLeaseName                 = "cloudsyncd"
	DefaultClusterName               = "kubernetes"
	DefaultNodeStatusUpdateFrequency = 5 * time.Minute
	DefaultNodeMonitorPeriod         = 5 * time.Second
	DefaultRouteReconciliationPeriod = 10 * time.Second
	DefaultMinResyncPeriod           = 12 * time.Hour
	DefaultConcurrentServiceSyncs    = 1
	DefaultConcurrentNodeSyncs       = 1
)

// LeaderElection configures the election on a coordination.k8s.io Lease.
type LeaderElection struct {
	// Enabled runs the controllers only while this process holds the Lease.
	Enabled bool
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity written into the Lease; empty: the hostname plus a random suffix.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod have client-go's
	// leaderelection meaning and must satisfy its ordering.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Config selects the controllers and their settings.
type Config struct {
	// Controllers to run, a set of the names above (see ParseNames).
	Controllers []string
	// ClusterName is handed to the load balancer and route calls.
	ClusterName string
	// ClusterCIDRs are the pod network(s) the route controller manages; at
	// most one per IP family. Required for Route.
	ClusterCIDRs []*net.IPNet
	// NodeStatusUpdateFrequency is how often CloudNodeController refreshes
	// the addresses and labels of initialised Nodes.
	NodeStatusUpdateFrequency time.Duration
	// NodeMonitorPeriod is how often CloudNodeLifecycleController asks the
	// cloud about not-ready Nodes.
	NodeMonitorPeriod time.Duration
	// RouteReconciliationPeriod is how often RouteController reconciles.
	RouteReconciliationPeriod time.Duration
	// MinResyncPeriod is the shared informers' resync, jittered up to twice it.
	MinResyncPeriod time.Duration
	// ConcurrentServiceSyncs and ConcurrentNodeSyncs are the worker counts.
	ConcurrentServiceSyncs, ConcurrentNodeSyncs int
	// LeaderElection configures the election.
	LeaderElection LeaderElection
}

// DefaultConfig returns upstream's defaults with no controller selected.
func DefaultConfig() Config {
	return Config{
		ClusterName:               DefaultClusterName,
		NodeStatusUpdateFrequency: DefaultNodeStatusUpdateFrequency,
		NodeMonitorPeriod:         DefaultNodeMonitorPeriod,
		RouteReconciliationPeriod: DefaultRouteReconciliationPeriod,
		MinResyncPeriod:           DefaultMinResyncPeriod,
		ConcurrentServiceSyncs:    DefaultConcurrentServiceSyncs,
		ConcurrentNodeSyncs:       DefaultConcurrentNodeSyncs,
		LeaderElection: LeaderElection{
			Enabled:       true,
			Namespace:     DefaultLeaseNamespace,
			Name:          DefaultLeaseName,
			LeaseDuration: DefaultLeaseDuration,
			RenewDeadline: DefaultRenewDeadline,
			RetryPeriod:   DefaultRetryPeriod,
		},
	}
}

// ParseNames checks a list of controller names (each entry may itself be a
// comma-separated list) and returns the set in start order. An unknown or
// empty name is an error naming it.
func ParseNames(list []string) ([]string, error) {
	seen := map[string]bool{}
	for _, entry := range list {
		for n := range strings.SplitSeq(entry, ",") {
			n = strings.TrimSpace(n)
			if !slices.Contains(Names, n) {
				return nil, fmt.Errorf("unknown controller %q (known: %s)", n, strings.Join(Names, ", "))
			}
			seen[n] = true
		}
	}
	var out []string
	for _, n := range Names {
		if seen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// ParseClusterCIDRs parses a comma-separated list of CIDRs the way
// cloud-controller-manager does for its route controller: one, or two of
// different IP families.
func ParseClusterCIDRs(s string) ([]*net.IPNet, error) {
	cidrs, err := netutils.ParseCIDRs(strings.Split(strings.TrimSpace(s), ","))
	if err != nil {
		return nil, err
	}
	if len(cidrs) > 2 {
		return nil, fmt.Errorf("%d CIDRs: at most two, one per IP family", len(cidrs))
	}
	if len(cidrs) == 2 {
		if dual, _ := netutils.IsDualStackCIDRs(cidrs); !dual {
			return nil, errors.New("two CIDRs must be one IPv4 and one IPv6")
		}
	}
	return cidrs, nil
}

// Has reports whether the controller name is selected.
func (c *Config) Has(name string) bool { return slices.Contains(c.Controllers, name) }
