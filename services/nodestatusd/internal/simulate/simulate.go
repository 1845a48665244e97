package simulate

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/microlet/microlet/services/nodestatusd/internal/agent"
	"github.com/microlet/microlet/services/nodestatusd/internal/registration"
	"github.com/microlet/microlet/services/nodestatusd/internal/server"
)

// LabelPrefix marks simulated Nodes with their prefix.
const LabelPrefix = "simulate.microlet.io/prefix"

// Name is the name of simulated node i.
func Name(prefix string, i int) string { return fmt.Sprintf("%s-%d", prefix, i) }

// Agents returns n agents sharing sh. Each registers like reg, with its
// own name and hostname and the simulation label.
func Agents(sh *agent.Shared, reg registration.Options, prefix string, n int) []*agent.Agent {
	out := make([]*agent.Agent, 0, n)
	for i := range n {
		r := reg
		r.NodeName = Name(prefix, i)
		r.Hostname = r.NodeName
		r.ExtraLabels = maps.Clone(reg.ExtraLabels)
		if r.ExtraLabels == nil {
			r.ExtraLabels = map[string]string{}
		}
		r.ExtraLabels[LabelPrefix] = prefix
		out = append(out, agent.New(r.NodeName, sh, r))
	}
	return out
}

// nodes is the simulation's server.Nodes.
type nodes struct{ cfg *Config }

var _ server.Nodes = nodes{}

// Validate implements server.Nodes: the simulation's own settings.
func (n nodes) Validate() error { return n.cfg.validate() }

// Share implements server.Nodes: N nodes share the clients' budget, the
// informer watches the Nodes labelled with the prefix, and with no
// podsyncd there is no pressure or device plugin to read.
func (n nodes) Share(sc *agent.SharedConfig) {
	sc.Nodes = n.cfg.Nodes
	sc.NodeSelector = labels.SelectorFromSet(labels.Set{LabelPrefix: n.cfg.Prefix})
	sc.Inputs.Pressure = nil
	sc.Inputs.Devices = nil
}

// Agents implements server.Nodes.
func (n nodes) Agents(sh *agent.Shared, reg registration.Options) []*agent.Agent {
	return Agents(sh, reg, n.cfg.Prefix, n.cfg.Nodes)
}
