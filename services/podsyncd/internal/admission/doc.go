// Package admission decides whether a pod may start on this node, as the
// kubelet's admit handlers do. The predicate handler: resources fit
// against allocatable (cpu, memory, ephemeral-storage, pods), node name,
// host ports, node selector and required node affinity, and NoExecute
// taints tolerated (not checked for static pods). The sysctl handler:
// only safe and allowed unsafe sysctls. The AppArmor handler: no
// AppArmor profile but Unconfined on a host that cannot enforce AppArmor.
// A rejection carries upstream's reason (OutOfcpu, NodeAffinity,
// SysctlForbidden, AppArmor, ...) and message, which become the pod's
// Failed status.
package admission
