package podsyncmetrics

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/microlet/microlet/internal/promwire"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// DefaultTimeout bounds one GetMetrics call: well inside Prometheus'
// default 10 s scrape timeout, so a hung podsyncd costs a scrape its
// kubelet part, never the whole scrape.
const DefaultTimeout = 3 * time.Second

// Gatherer is a prometheus.Gatherer of one of podsyncd's metric sets.
type Gatherer struct {
	client  podsyncv1.PodSyncServiceClient
	set     podsyncv1.MetricsSet
	timeout time.Duration
	log     *slog.Logger
	errors  prometheus.Counter

	mu      sync.Mutex
	failing bool
}

// Option configures a Gatherer.
type Option func(*Gatherer)

// WithTimeout replaces DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(g *Gatherer) { g.timeout = d } }

// WithLogger logs failures (the first of a run at warning level, the
// rest at debug) and the recovery.
func WithLogger(l *slog.Logger) Option { return func(g *Gatherer) { g.log = l } }

// NewErrors registers microlet_nodeapi_podsyncd_metrics_errors_total{set}
// in reg, for WithErrors.
func NewErrors(reg prometheus.Registerer) *prometheus.CounterVec {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "microlet_nodeapi_podsyncd_metrics_errors_total",
		Help: "Scrapes whose kubelet metrics could not be fetched from podsyncd (served without them), by metric set.",
	}, []string{"set"})
	reg.MustRegister(vec)
	return vec
}

// WithErrors counts failed fetches in vec (from NewErrors) under the set's name.
func WithErrors(vec *prometheus.CounterVec) Option {
	return func(g *Gatherer) { g.errors = vec.WithLabelValues(SetName(g.set)) }
}

// SetName is the set's label value: "kubelet" or "probes".
func SetName(s podsyncv1.MetricsSet) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "METRICS_SET_"))
}

// New returns a Gatherer of set from client.
func New(client podsyncv1.PodSyncServiceClient, set podsyncv1.MetricsSet, opts ...Option) *Gatherer {
	g := &Gatherer{client: client, set: set, timeout: DefaultTimeout, log: slog.Default()}
	for _, o := range opts {
		o(g)
	}
	return g
}

// Gather implements prometheus.Gatherer. It never returns an error: when
// podsyncd cannot answer it returns no families, counts and logs the
// failure, and the scrape goes on with the other gatherers.
func (g *Gatherer) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	resp, err := g.client.GetMetrics(ctx, &podsyncv1.GetMetricsRequest{Set: g.set})
	var mfs []*dto.MetricFamily
	if err == nil {
		mfs, err = promwire.Decode(resp.GetFamilies())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		if g.errors != nil {
			g.errors.Inc()
		}
		level := slog.LevelDebug
		if !g.failing {
			level = slog.LevelWarn
		}
		g.failing = true
		g.log.Log(ctx, level, "podsyncd's metrics unavailable; serving this scrape without them", "set", SetName(g.set), "err", err)
		return nil, nil
	}
	if g.failing {
		g.log.Info("podsyncd's metrics available again", "set", SetName(g.set))
		g.failing = false
	}
	return mfs, nil
}
