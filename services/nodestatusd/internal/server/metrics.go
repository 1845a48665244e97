package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/microlet/microlet/services/nodestatusd/internal/agent"
)

// registerMetrics exposes what the agents did, summed over all of them
// (one for nodestatusd, N for nodestatussim).
func registerMetrics(reg prometheus.Registerer, agents []*agent.Agent) {
	if reg == nil {
		return
	}
	sum := func(f func(*agent.Agent) int) func() float64 {
		return func() float64 {
			total := 0
			for _, a := range agents {
				total += f(a)
			}
			return float64(total)
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nodestatusd_nodes", Help: "Nodes this process maintains."},
			func() float64 { return float64(len(agents)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodestatusd_status_patches_total", Help: "Node status patches accepted by the API server."},
			sum(func(a *agent.Agent) int { return a.Updater().Patches() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "nodestatusd_registrations_total", Help: "Successful Node registrations, re-registrations included."},
			sum((*agent.Agent).Registrations)),
	)
}
