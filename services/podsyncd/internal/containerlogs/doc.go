// Package containerlogs manages the files of container logs on the node, as
// the kubelet's container log manager (pkg/kubelet/logs) and its log helpers
// do: the `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`
// symlinks log shippers read, the removal of a container's log files (the
// current one and every rotated one) when the container goes, and rotation
// (Rotator): a running container's log past the size limit is renamed with a
// timestamp suffix, the runtime asked to reopen it (CRI ReopenContainerLog),
// older rotated files compressed with gzip and the oldest ones removed so a
// container keeps at most the configured number of files.
//
//	r := containerlogs.NewRotator(rt, containerlogs.Policy{MaxSize: 10 << 20, MaxFiles: 5}, log)
//	go r.Run(ctx, 10*time.Second)
package containerlogs
