package simulate

import (
	"fmt"
	"maps"
	"time"

	"github.com/microlet/microlet/services/nodestatusd/internal/agent"
	"github.com/microlet/microlet/services/nodestatusd/internal/registration"
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

// StartSpread is the window over which n simulated nodes start: a second
// per hundred nodes, so thousands do not register in one burst and their
// periods do not line up.
func StartSpread(n int) time.Duration { return time.Duration(n/100) * time.Second }
