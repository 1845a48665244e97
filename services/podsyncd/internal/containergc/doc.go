// Package containergc is the kubelet's container garbage collector
// (pkg/kubelet/kuberuntime/kuberuntime_gc.go with the policy of
// pkg/kubelet/container/container_gc.go) for podsyncd. Each pass, run every
// minute by podsyncd:
//
//   - containers that are not running and were created at least MinAge ago
//     are grouped by (pod UID, container name); all of a removed pod's go, then
//     each group keeps its MaxPerPodContainer newest, then, if more than
//     MaxContainers remain on the node, every group is cut to an even share
//     (at least one) and then the oldest go first;
//   - a not-ready sandbox that holds no container goes unless it is the newest
//     sandbox of a pod that still exists;
//   - the log directories of removed pods go, and symlinks in the container
//     log symlink dir whose log file and container are gone.
//
// One difference from the kubelet, on purpose: the newest instance of each
// container of a pod that still exists is never removed, whatever the limits
// (MaxPerPodContainer 0, a small MaxContainers). podsyncd needs it: restart
// counts continue from it, `kubectl logs --previous` and the last state read
// it, and an ephemeral container that ran must not start again.
//
// Removing a container removes its log files (rotated ones included) and its
// symlink first, as the kubelet's removeContainer does.
package containergc
