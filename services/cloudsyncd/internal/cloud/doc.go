// Package cloud builds, from cloudsyncd's provider settings, a
// k8s.io/cloud-provider cloudprovider.Interface that answers for every node
// of the cluster, not only the one cloudsyncd runs on. It is what the
// cluster-wide controllers (service, node, node-lifecycle, route) drive; node
// mode keeps using package provider, which answers for one node.
//
// The API:
//
//	func New(cfg Config, opts ...Option) (Cloud, error)
//	func WithLogger(log *slog.Logger) Option
//	func WithKubeClient(cs kubernetes.Interface) Option // needed by "local"
//
//	type Cloud interface {
//		cloudprovider.Interface
//		Close() error // stops watches, informers, listeners and connections
//	}
//
// Config carries the keys of cloudsyncd's config file (server.Config.Cloud()
// fills it). What each cloud_provider answers:
//
//   - static: InstancesV2 from static_file in its cluster form (nodes:
//     keyed by Node name, or matched by provider_id). A Node the file does not
//     list does not exist (InstanceExists false), so the node-lifecycle
//     controller deletes it; shutdown and metadata come from its entry. The
//     single-node form names no node: every call fails, nothing is deleted.
//     No LoadBalancer, no Routes.
//   - metadata: the metadata service only knows its own instance, so
//     InstancesV2 answers for the Node named node_name (or whose providerID is
//     the instance's) and fails for any other. No LoadBalancer, no Routes.
//   - external: InstancesV2 over the plug-in's InstancesService;
//     LoadBalancer() and Routes() are true only when the plug-in's GetInfo lists
//     CAPABILITY_LOAD_BALANCER and CAPABILITY_ROUTES (asked once, waiting up
//     to 10 s for the plug-in; not cached when unreachable).
//   - local: load balancers made real on this host (package
//     provider/local); InstancesV2 says every Node exists and none is shut
//     down, and returns no addresses, so Nodes keep their own. Needs WithKubeClient.
//   - any other name: the provider registered with
//     cloudprovider.RegisterCloudProvider, passed through as it is
//     (cloud_config is its config file).
//
// Initialize is a no-op for the built-in providers (they need no client
// builder) and is passed through to a registered one; callers should call it
// as the cloud-controller-manager does.
//
//	c, err := cloud.New(cfg.Cloud(), cloud.WithKubeClient(cs), cloud.WithLogger(log))
//	if err != nil { return err } // one line naming the key at fault
//	defer c.Close()
//	c.Initialize(clientBuilder, ctx.Done())
//	lb, ok := c.LoadBalancer()
package cloud
