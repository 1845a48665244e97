// Package volumes materialises a pod's volumes on the node under podsyncd's
// data dir (<data-dir>/pods/<uid>/volumes/<plugin>/<name>) so that they can
// be handed to the runtime as CRI mounts: emptyDir, hostPath (with type
// checks), configMap, secret, downwardAPI and projected (configMap, secret
// and downwardAPI sources). Files of the API-backed volumes are written
// atomically the kubelet's way (a fresh timestamped dir, then a "..data"
// symlink swapped by rename), so a running container sees an update whole.
// An image volume (volumes[].image) has nothing on the host: it is recorded
// with Image set, and podruntime asks the runtime to mount the pulled image.
// A pod that mounts a volume with propagation (HostToContainer,
// Bidirectional) gets its volumes dir on a shared mount of its own, which
// Cleanup detaches.
//
//	vm := volumes.New(dataDir, src, tokens) // volumes.WithClock(clk) in tests
//	if err := vm.Setup(ctx, pod, info); err != nil { /* FailedMount: retry */ }
//	vm.Paths(pod.UID)   // volume name -> host path and read-only flag
//	vm.Cleanup(pod.UID) // once the pod is gone
package volumes
