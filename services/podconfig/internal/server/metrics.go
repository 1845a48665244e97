package server

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	updates      *prometheus.CounterVec
	sourceErrors *prometheus.CounterVec
	watchers     prometheus.Gauge
	resyncs      *prometheus.CounterVec
	pods         *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podconfig", Name: "updates_total",
			Help: "Merged pod updates published, by operation and source.",
		}, []string{"op", "source"}),
		sourceErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podconfig", Name: "source_errors_total",
			Help: "Problems reported by pod sources (bad manifests, unreachable URL or API server, refused pods).",
		}, []string{"source"}),
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "microlet", Subsystem: "podconfig", Name: "watchers",
			Help: "Open Watch streams.",
		}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podconfig", Name: "resyncs_total",
			Help: "Snapshots sent to watchers instead of the updates they missed, by reason.",
		}, []string{"reason"}),
		pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "microlet", Subsystem: "podconfig", Name: "pods",
			Help: "Pods each source currently holds.",
		}, []string{"source"}),
	}
	if reg != nil {
		reg.MustRegister(m.updates, m.sourceErrors, m.watchers, m.resyncs, m.pods)
	}
	return m
}

// sourceState remembers each source's last problem for SourcesReady and
// counts problems; it is the sources' Reporter.
type sourceState struct {
	configured []string
	m          *metrics

	mu   sync.Mutex
	last map[string]string
}

func newSourceState(configured []string, m *metrics) *sourceState {
	return &sourceState{configured: configured, m: m, last: map[string]string{}}
}

// Error implements sources.Reporter.
func (st *sourceState) Error(source, where string, err error) {
	st.m.sourceErrors.WithLabelValues(source).Inc()
	msg := err.Error()
	if where != "" {
		msg = where + ": " + msg
	}
	st.mu.Lock()
	st.last[source] = msg
	st.mu.Unlock()
}

// OK implements sources.Reporter.
func (st *sourceState) OK(source string) {
	st.mu.Lock()
	delete(st.last, source)
	st.mu.Unlock()
}

func (st *sourceState) lastError(source string) string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.last[source]
}
