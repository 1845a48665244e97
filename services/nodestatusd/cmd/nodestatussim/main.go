// Command nodestatussim keeps many simulated nodes registered, Ready and
// leased in a control plane, with nodestatusd's own code: a load generator
// like kwok (package simulate; docs/nodestatusd.md, Simulation).
//
//	nodestatussim --kubeconfig admin.kubeconfig --nodes 1000 --prefix sim --node-ip 10.0.0.1
package main

import (
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/nodestatusd/internal/simulate"
)

func main() { service.Main(simulate.New()) }
