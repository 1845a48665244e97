// Package simulate is nodestatussim (services/nodestatusd/cmd/nodestatussim):
// nodestatusd keeping many made-up nodes instead of its own, for
// load-testing a control plane, as kwok does in a binary of its own. Nodes
// <prefix>-0 … <prefix>-N-1 are each registered, their status synced and
// their Lease renewed by nodestatusd's own code (its server, agents and
// Runner), all sharing one pair of API clients, one Node informer and one
// reading of the host, the CRI and the cloud. Simulated Nodes carry
// LabelPrefix so the shared informer watches only them; they have no
// podsyncd, so their pressure conditions stay False and they have no
// device plugins.
//
//	service.Main(simulate.New()) // nodestatussim --kubeconfig admin.kubeconfig --nodes 1000 --prefix sim
package simulate
