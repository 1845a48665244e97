// Package podstatus turns a pod's runtime state into its API PodStatus the way
// the kubelet's generateAPIPodStatus does: container statuses with state, last
// state, restart count, image and IDs; the phase from upstream's getPhase
// rules; and the PodReadyToStartContainers, Initialized, ContainersReady,
// Ready and PodScheduled conditions.
package podstatus
