// Package allocation is podsyncd's share of the kubelet's allocation manager
// and resize status (pkg/kubelet/allocation and the status manager's resize
// conditions) for in-place pod resize: the resources allocated to each pod's
// resizable containers (admitted, possibly behind the spec while a resize is
// pending), the resources actuated in the runtime (what the last successful
// create or UpdateContainerResources applied), both checkpointed in one file
// under podsyncd's data dir so a restart keeps them, and the PodResizePending
// and PodResizeInProgress conditions.
package allocation
