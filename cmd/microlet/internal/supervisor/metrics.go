package supervisor

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/microlet/microlet/internal/service"
)

// metrics are the supervisor's own Prometheus series, served on
// --metrics-addr beside the gRPC metrics of SupervisorService.
type metrics struct {
	registry *prometheus.Registry
	restarts *prometheus.CounterVec
	up       *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "microlet_supervisor_restarts_total",
			Help: "Restarts of a service after its process ended on its own.",
		}, []string{"component"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "microlet_supervisor_component_running",
			Help: "1 while the service's process runs, 0 otherwise.",
		}, []string{"component"}),
	}
	m.registry.MustRegister(m.restarts, m.up,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// serve starts the /metrics endpoint; a port already in use is the caller's
// usage error.
func (m *metrics) serve(addr string, s *Supervisor) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", service.MetricsHandler(m.registry))
	srv, err := service.ServeHTTP("metrics_addr", addr, mux, s.log)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return srv, nil
}
