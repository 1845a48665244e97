// Package agent runs one node: register it, keep its status true and renew
// its Lease, re-registering when the Node is deleted. Several agents (the
// simulation) share one Shared: API clients, the Node informer, the host,
// CRI and cloud readings, so N nodes cost little more than their writes.
//
//	sh, err := agent.NewShared(ctx, agent.SharedConfig{...})
//	a := agent.New("node-1", sh, regOpts)
//	go a.Run(ctx)
//	node := a.Published().Get()
//
// Without a kubeconfig (standalone) the agent only computes the Node and
// publishes it for GetNode/WatchNode.
package agent
