// Package external is the provider that calls a cloud-provider plug-in over
// microlet's own gRPC API (proto/microlet/cloudprovider/v1) on a unix socket.
// The plug-in is a separate process in any language; it may die and be
// replaced at any time, so the connection is re-established with backoff and
// the plug-in's identity is asked again after it was unreachable.
//
// Client answers for any node of the cluster: it implements
// k8s.io/cloud-provider's InstancesV2, LoadBalancer and Routes over the
// plug-in's InstancesService, LoadBalancerService and RoutesService, each
// call refused with an error naming the capability the plug-in's GetInfo does
// not list. Provider is node mode's view of it, for the node cloudsyncd runs on.
//
//	p, _ := external.New("unix:///run/microlet/cloudprovider.sock", "node-a", log)
//	md, err := p.InstanceMetadata(ctx)
//
//	c, _ := external.Dial("unix:///run/microlet/cloudprovider.sock", log)
//	if c.HasCapability(external.CapabilityLoadBalancer) {
//		st, err := c.EnsureLoadBalancer(ctx, "kubernetes", svc, nodes)
//	}
package external
