// Package stats is the kubelet's stats API for nodeapi: the Summary of
// /stats/summary (k8s.io/kubelet/pkg/apis/stats/v1alpha1) and the resource
// metrics of /metrics/resource that metrics-server scrapes for `kubectl
// top`, and cAdvisor's container series of /metrics/cadvisor, read from
// each running container's cgroups. The node's numbers come from the host (the root cgroup, v1 or v2;
// /proc; statfs of the data dir), pods' and containers' from the CRI
// (ListPodSandbox, ListContainers, ListPodSandboxStats, ImageFsInfo), and
// volumes' and logs' from walking podsyncd's pod dirs and the pod log dirs.
//
//	rt, _ := remote.NewRemoteRuntimeService(ctx, endpoint, 2*time.Minute, nil, false)
//	img, _ := remote.NewRemoteImageService(ctx, endpoint, 2*time.Minute, nil, false)
//	p := stats.New(rt, img, stats.WithNodeName(node), stats.WithRootDir(dataDir), stats.WithLogger(log))
//	mux.Handle("/stats/summary", stats.SummaryHandler(p))          // behind nodes/stats authz
//	mux.Handle("/metrics/resource", stats.ResourceMetricsHandler(p)) // behind nodes/metrics authz
//	mux.Handle("/metrics/cadvisor", stats.CadvisorMetricsHandler(p)) // likewise
//	sum, err := p.Summary(ctx, true)                                  // or call it directly
//
// The CRI reports cumulative CPU time only; the Provider keeps the
// previous sample of the node, each pod and each container and reports
// usageNanoCores as the rate since then, so it appears from the second
// scrape on.
package stats
