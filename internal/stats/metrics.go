package stats

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's resource metrics: the same names, labels, types and
// stability levels (its help texts carry the level in brackets), so
// metrics-server and Prometheus rules written for the kubelet work
// unchanged. The kubelet's scrape_error, deprecated since 1.29, is hidden
// in 1.36 and not served here either.
var (
	containerLabels = []string{"container", "pod", "namespace"}
	podLabels       = []string{"pod", "namespace"}

	nodeCPUDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"[STABLE] CPU time the node has used since boot, in core-seconds", nil, nil)
	nodeMemoryDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"[STABLE] Memory the node is using and cannot easily reclaim (its working set), in bytes", nil, nil)
	nodeSwapDesc = prometheus.NewDesc("node_swap_usage_bytes",
		"[ALPHA] Swap the node is using, in bytes; not reported on Windows", nil, nil)
	containerStartDesc = prometheus.NewDesc("container_start_time_seconds",
		"[STABLE] When the container was started, in seconds since the Unix epoch", containerLabels, nil)
	containerCPUDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"[STABLE] CPU time the container has used, in core-seconds", containerLabels, nil)
	containerMemoryDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"[STABLE] The container's memory working set, in bytes", containerLabels, nil)
	containerSwapDesc = prometheus.NewDesc("container_swap_usage_bytes",
		"[ALPHA] Swap the container is using, in bytes; not reported on Windows", containerLabels, nil)
	containerSwapLimitDesc = prometheus.NewDesc("container_swap_limit_bytes",
		"[ALPHA] Swap the container may use, in bytes; not reported on Windows", containerLabels, nil)
	podCPUDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"[STABLE] CPU time the pod has used, in core-seconds", podLabels, nil)
	podMemoryDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"[STABLE] The pod's memory working set, in bytes", podLabels, nil)
	podSwapDesc = prometheus.NewDesc("pod_swap_usage_bytes",
		"[ALPHA] Swap the pod is using, in bytes; not reported on Windows", podLabels, nil)
	scrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"[STABLE] 1 when the stats behind this scrape could not be read, else 0", nil, nil)
)

// ResourceMetricsHandler serves the kubelet's /metrics/resource in the
// Prometheus text format (or OpenMetrics when asked): node, pod and
// container CPU time, working set and swap with the samples' own
// timestamps, container start times, and resource_scrape_error, which is 1
// only when the Summary behind the scrape failed as a whole. Each request
// takes one CPU-and-memory Summary under the request's context. The caller
// mounts it behind authentication and authorization (nodes/metrics).
func ResourceMetricsHandler(p *Provider) http.Handler {
	return collectorHandler(promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, ProcessStartTime: p.created},
		func(ctx context.Context) prometheus.Collector { return resourceCollector{p: p, ctx: ctx} })
}

// collectorHandler serves the collector made for each request. A registry
// per request carries the request's context into the collector;
// registries are cheap, the stats behind them are not.
func collectorHandler(opts promhttp.HandlerOpts, collector func(context.Context) prometheus.Collector) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collector(r.Context()))
		promhttp.HandlerFor(reg, opts).ServeHTTP(w, r)
	})
}

// resourceCollector turns one Summary into the resource metrics.
type resourceCollector struct {
	p   *Provider
	ctx context.Context
}

// Describe implements prometheus.Collector.
func (c resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{nodeCPUDesc, nodeMemoryDesc, nodeSwapDesc, containerStartDesc,
		containerCPUDesc, containerMemoryDesc, containerSwapDesc, containerSwapLimitDesc,
		podCPUDesc, podMemoryDesc, podSwapDesc, scrapeErrorDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c resourceCollector) Collect(ch chan<- prometheus.Metric) {
	failed := 0.0
	defer func() { ch <- prometheus.MustNewConstMetric(scrapeErrorDesc, prometheus.GaugeValue, failed) }()
	s, err := c.p.Summary(c.ctx, true)
	if err != nil {
		failed = 1
		c.p.log.Error("resource metrics: summary failed", "err", err)
		return
	}
	emitCPU(ch, nodeCPUDesc, s.Node.CPU)
	emitWorkingSet(ch, nodeMemoryDesc, s.Node.Memory)
	if sw := s.Node.Swap; sw != nil && sw.SwapUsageBytes != nil {
		stamped(ch, sw.Time.Time, nodeSwapDesc, prometheus.GaugeValue, float64(*sw.SwapUsageBytes))
	}
	for _, pod := range s.Pods {
		for _, ctr := range pod.Containers {
			labels := []string{ctr.Name, pod.PodRef.Name, pod.PodRef.Namespace}
			if ctr.StartTime.Unix() > 0 {
				if m, err := prometheus.NewConstMetric(containerStartDesc, prometheus.GaugeValue,
					float64(ctr.StartTime.UnixNano())/float64(time.Second), labels...); err == nil {
					ch <- m
				}
			}
			emitCPU(ch, containerCPUDesc, ctr.CPU, labels...)
			emitWorkingSet(ch, containerMemoryDesc, ctr.Memory, labels...)
			if sw := ctr.Swap; sw != nil {
				used := 0.0
				if sw.SwapUsageBytes != nil {
					used = float64(*sw.SwapUsageBytes)
					stamped(ch, sw.Time.Time, containerSwapDesc, prometheus.GaugeValue, used, labels...)
				}
				if sw.SwapAvailableBytes != nil {
					// The limit is what is left plus what is used.
					stamped(ch, sw.Time.Time, containerSwapLimitDesc, prometheus.GaugeValue, float64(*sw.SwapAvailableBytes)+used, labels...)
				}
			}
		}
		labels := []string{pod.PodRef.Name, pod.PodRef.Namespace}
		emitCPU(ch, podCPUDesc, pod.CPU, labels...)
		emitWorkingSet(ch, podMemoryDesc, pod.Memory, labels...)
		if sw := pod.Swap; sw != nil && sw.SwapUsageBytes != nil {
			stamped(ch, sw.Time.Time, podSwapDesc, prometheus.GaugeValue, float64(*sw.SwapUsageBytes), labels...)
		}
	}
}

func emitCPU(ch chan<- prometheus.Metric, d *prometheus.Desc, cpu *statsv1alpha1.CPUStats, labels ...string) {
	if cpu == nil || cpu.UsageCoreNanoSeconds == nil {
		return
	}
	stamped(ch, cpu.Time.Time, d, prometheus.CounterValue, float64(*cpu.UsageCoreNanoSeconds)/float64(time.Second), labels...)
}

func emitWorkingSet(ch chan<- prometheus.Metric, d *prometheus.Desc, m *statsv1alpha1.MemoryStats, labels ...string) {
	if m == nil || m.WorkingSetBytes == nil {
		return
	}
	stamped(ch, m.Time.Time, d, prometheus.GaugeValue, float64(*m.WorkingSetBytes), labels...)
}

// stamped sends a sample carrying the time it was measured at, as the
// kubelet's do: a scraper then computes rates over the samples' real
// interval, not the scrapes'. A sample whose labels are not valid (a
// runtime's container name that is not UTF-8) is dropped alone.
func stamped(ch chan<- prometheus.Metric, t time.Time, d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, vt, v, labels...)
	if err != nil {
		return
	}
	ch <- prometheus.NewMetricWithTimestamp(t, m)
}
