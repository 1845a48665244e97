// Package controllers is cloudsyncd's controller mode: k8s.io/cloud-provider's
// own cluster-wide controllers (ServiceController, CloudNodeController,
// CloudNodeLifecycleController and, when asked, RouteController) run against a
// cloudprovider.Interface, one shared informer factory and, by default, leader
// election on a Lease so that only one of several replicas acts.
//
//	cfg := controllers.DefaultConfig()
//	cfg.Controllers, _ = controllers.ParseNames([]string{"service", "node"})
//	m, err := controllers.New(cfg, restConfig, cloud,
//		controllers.WithLogger(log), controllers.WithRegistry(reg))
//	if err != nil { ... }
//	err = m.Run(ctx) // ErrLeadershipLost when another replica took the Lease
//
// The controllers are upstream's, wired the way k8s.io/cloud-provider/app
// wires them (same defaults, feature gates, worker counts and jittered
// resync); this package only chooses which run and when. Losing the Lease
// stops them and Run returns ErrLeadershipLost, so the process exits and its
// supervisor restarts it as a candidate, as kube-controller-manager does. A
// clean stop (ctx cancelled) stops the controllers first and then gives the
// Lease up, so a standby takes over without waiting for it to expire.
package controllers
