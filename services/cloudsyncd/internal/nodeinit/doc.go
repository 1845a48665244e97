// Package nodeinit does the cloud initialisation of cloudsyncd's own Node,
// the node side of k8s.io/cloud-provider's cloud-node and node-lifecycle
// controllers: while the Node carries node.cloudprovider.kubernetes.io/uninitialized
// it sets spec.providerID, the instance-type, zone and region labels (GA and
// beta), any additional labels and the addresses, then removes that taint; and
// it keeps node.cloudprovider.kubernetes.io/shutdown on the Node exactly while
// the provider says the instance is shut down.
//
// Changing a Node's taints needs a credential other than the node's own: the
// NodeRestriction admission plugin refuses it for system:node:<name>, as it
// should. The controller checks its credential first and, when it cannot do
// the job, says so in one log line and stops, leaving the rest of cloudsyncd
// running.
//
//	c := nodeinit.New(clientset, "node-a", syncManager)
//	go c.Run(ctx)
package nodeinit
