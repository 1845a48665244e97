// Package syncmanager keeps the node's addresses from a cloud provider fresh,
// the job of the kubelet's cloud resource sync manager: it asks the provider
// every sync frequency, bounds each call with the provider timeout, keeps the
// last good addresses when a call fails, and lets callers wait for the first
// answer or watch for changes.
//
//	m := syncmanager.New(p, syncmanager.WithSyncFrequency(10*time.Second))
//	go m.Run(ctx)
//	addrs, err := m.NodeAddresses(ctxWithDeadline) // waits for the first answer
//
// Before the first success callers get the provider's error; after it they
// get the last good addresses, whatever later calls say, because a node that
// briefly loses its metadata service has not changed its addresses.
package syncmanager
