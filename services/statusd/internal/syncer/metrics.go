package syncer

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the syncer's Prometheus collectors.
type Metrics struct {
	// SyncLatency is the time from the first unsent change of a pod being
	// accepted to the write that carried it.
	SyncLatency prometheus.Histogram
	// Writes counts API writes by verb (patch, delete).
	Writes *prometheus.CounterVec
	// Skipped counts syncs that needed no write (the patch was empty).
	Skipped prometheus.Counter
	// Coalesced counts changes that rode along in a later change's write.
	Coalesced prometheus.Counter
	// Errors counts API errors by HTTP code ("0" for transport errors).
	Errors *prometheus.CounterVec
	// LiveGets counts GETs made on conflict or reconcile.
	LiveGets prometheus.Counter
	// TooLarge counts statuses the API server refused as too large; each
	// is written once, and again only when it changes.
	TooLarge prometheus.Counter
}

// NewMetrics creates the collectors and registers them (reg may be nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		SyncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "statusd_sync_duration_seconds", Help: "Time from an accepted status change to its write to the API server.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		Writes:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statusd_api_writes_total", Help: "Writes to the API server by verb."}, []string{"verb"}),
		Skipped:   prometheus.NewCounter(prometheus.CounterOpts{Name: "statusd_noop_syncs_total", Help: "Syncs skipped because the API already had the status."}),
		Coalesced: prometheus.NewCounter(prometheus.CounterOpts{Name: "statusd_coalesced_changes_total", Help: "Status changes merged into a later change's single write."}),
		Errors:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statusd_api_errors_total", Help: "API errors by HTTP status code (0: no response)."}, []string{"code"}),
		LiveGets:  prometheus.NewCounter(prometheus.CounterOpts{Name: "statusd_live_gets_total", Help: "Live GETs of pods, made on conflict or reconcile only."}),
		TooLarge: prometheus.NewCounter(prometheus.CounterOpts{Name: "statusd_status_too_large_total",
			Help: "Statuses the API server refused as too large; not written again until they change."}),
	}
	if reg != nil {
		reg.MustRegister(m.SyncLatency, m.Writes, m.Skipped, m.Coalesced, m.Errors, m.LiveGets, m.TooLarge)
	}
	return m
}
