package syncloop

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/microlet/microlet/services/podsyncd/internal/containergc"
	"github.com/microlet/microlet/services/podsyncd/internal/pleg"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// gcMetrics count the container garbage collector's passes and what they
// removed, which the kubelet's metrics leave out, so a test (or an
// operator) can tell that a stretch of time covered real passes: "nothing
// was removed" is only a proof over an interval in which the collector ran.
type gcMetrics struct {
	passes  *prometheus.CounterVec
	removed *prometheus.CounterVec
}

func newGCMetrics(reg prometheus.Registerer) *gcMetrics {
	m := &gcMetrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podsyncd", Name: "container_gc_passes_total",
			Help: "Container garbage collector passes, by result (success, error).",
		}, []string{"result"}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podsyncd", Name: "container_gc_removed_total",
			Help: "What the container garbage collector removed, by object (container, sandbox, pod_log_dir).",
		}, []string{"object"}),
	}
	for _, r := range []string{"success", "error"} {
		m.passes.WithLabelValues(r)
	}
	for _, o := range []string{"container", "sandbox", "pod_log_dir"} {
		m.removed.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.passes, m.removed)
	}
	return m
}

// pass counts one collector pass and what it removed.
func (m *gcMetrics) pass(res containergc.Result, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	m.passes.WithLabelValues(result).Inc()
	m.removed.WithLabelValues("container").Add(float64(res.Containers))
	m.removed.WithLabelValues("sandbox").Add(float64(res.Sandboxes))
	m.removed.WithLabelValues("pod_log_dir").Add(float64(res.LogDirs))
}

// registerPodCacheMetrics exports how often a sync's read of a pod's
// runtime state was served by the pod cache (hit) or went to the runtime
// (miss), as microlet_podsyncd_pod_cache_reads_total{result}.
func registerPodCacheMetrics(reg prometheus.Registerer, c *pleg.Cache[podruntime.PodStatus]) {
	if reg == nil {
		return
	}
	for _, r := range []struct {
		result string
		value  func() float64
	}{
		{"hit", func() float64 { h, _ := c.Stats(); return float64(h) }},
		{"miss", func() float64 { _, m := c.Stats(); return float64(m) }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podsyncd", Name: "pod_cache_reads_total",
			Help:        "Reads of a pod's runtime state by a pod sync, by result: hit (served by the pod cache) or miss (read from the runtime).",
			ConstLabels: prometheus.Labels{"result": r.result},
		}, r.value))
	}
}
