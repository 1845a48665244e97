// Package agent runs nodes: register each, keep its status true and renew
// its Lease, re-registering when the Node is deleted. Several agents
// (nodestatussim's) share one Shared: API clients, the Node informer, the host,
// CRI and cloud readings, so N nodes cost little more than their writes.
//
// An agent's work is a set of steps (register, renew the Lease, sync the
// status, the startup loop that reports Ready early); a Runner schedules
// them on a delaying work queue with a fixed pool of workers, each step
// again a period after it ended, as the kubelet's loops do. One node and
// five thousand run the same code on a handful of goroutines.
//
//	sh, err := agent.NewShared(ctx, agent.SharedConfig{...})
//	a := agent.New("node-1", sh, regOpts)
//	go agent.NewRunner([]*agent.Agent{a}).Run(ctx)
//	node := a.Published().Get()
//
// Without a kubeconfig (standalone) the agent only computes the Node and
// publishes it for GetNode/WatchNode.
package agent
