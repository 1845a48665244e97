// Package podsyncmetrics fetches the kubelet's metrics that live in
// podsyncd (kubelet_* and the prober's) at scrape time, so nodeapi serves
// them on the kubelet API's /metrics and /metrics/probes beside its own.
// A Gatherer asks PodSyncService.GetMetrics with a short timeout; when
// podsyncd does not answer (restarting, stopped) the scrape still serves
// nodeapi's own metrics, the failure is counted in
// microlet_nodeapi_podsyncd_metrics_errors_total{set} and logged.
//
//	errs := podsyncmetrics.NewErrors(reg)
//	kubelet := podsyncmetrics.New(client, podsyncv1.MetricsSet_METRICS_SET_KUBELET,
//		podsyncmetrics.WithErrors(errs), podsyncmetrics.WithLogger(log))
//	h := promhttp.HandlerFor(prometheus.Gatherers{reg, kubelet}, promhttp.HandlerOpts{})
package podsyncmetrics
