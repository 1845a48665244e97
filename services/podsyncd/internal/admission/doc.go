// Package admission decides whether a pod may start on this node, as the
// kubelet's predicate admit handler does: resources fit against allocatable
// (cpu, memory, ephemeral-storage, pods), node name, host ports, node selector
// and required node affinity, and NoExecute taints tolerated (not checked for
// static pods). A rejection carries upstream's reason (OutOfcpu, NodeAffinity,
// ...) and message, which become the pod's Failed status.
package admission
