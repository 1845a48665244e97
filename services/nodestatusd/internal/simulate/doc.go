// Package simulate runs many nodes in one process for load-testing a
// control plane: <prefix>-0 … <prefix>-N-1, each registered, its status
// synced and its Lease renewed exactly as a real node's, all sharing one
// pair of API clients, one Node informer and one reading of the host, the
// CRI and the cloud. Simulated Nodes carry LabelPrefix so the shared
// informer watches only them.
//
//	agents := simulate.Agents(shared, regOpts, "sim", 1000)
//	err := simulate.RunAll(ctx, agents)
package simulate
