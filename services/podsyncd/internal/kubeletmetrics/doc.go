// Package kubeletmetrics holds the kubelet's Prometheus metrics that
// podsyncd keeps (kubelet_* and the prober's prober_*), with upstream's
// names, labels, help texts, buckets and stability levels, in two
// component-base registries: Kubelet (what the kubelet serves on /metrics)
// and Probes (/metrics/probes). The sync loop's parts call the methods of
// one *Metrics at upstream's update points; nodeapi reads the registries
// through PodSyncService.GetMetrics and serves them on :10250.
//
//	m := kubeletmetrics.New()
//	m.SetNodeName("node-a")
//	m.PodStarted(3 * time.Second)
//	families, _ := m.Kubelet().Gather()
//
// Every method is safe on a nil *Metrics (it does nothing), so parts built
// without metrics (unit tests) need no stand-in.
package kubeletmetrics
