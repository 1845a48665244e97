// Package simulate makes the agents of many nodes in one process for
// load-testing a control plane: <prefix>-0 … <prefix>-N-1, each registered,
// its status synced and its Lease renewed exactly as a real node's, all
// sharing one pair of API clients, one Node informer, one reading of the
// host, the CRI and the cloud, and one agent.Runner. Simulated Nodes carry
// LabelPrefix so the shared informer watches only them.
//
//	agents := simulate.Agents(shared, regOpts, "sim", 1000)
//	err := agent.NewRunner(agents, agent.WithStartSpread(simulate.StartSpread(1000))).Run(ctx)
package simulate
