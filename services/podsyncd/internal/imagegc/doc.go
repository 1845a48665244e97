// Package imagegc is the kubelet's image garbage collector
// (pkg/kubelet/images/image_gc_manager.go) for podsyncd. It lives in
// podsyncd rather than nodestatusd (which also lists images, for the Node's
// status) because it acts: it removes images through the CRI image service
// podsyncd pulls with, beside the container GC, and the eviction manager's
// node-level reclaim will call both.
//
// Each pass (every 5 minutes, the kubelet's ImageGCPeriod) lists the images
// and every container (running or not); an image a container runs, or
// mounts as an image volume (the image mounts its CRI status reports, by
// image ID or a name of the image), is in use and gets "last used = now"; a
// new image gets "first detected = now". Images
// that are in use or pinned by the runtime (the pause image) are never
// candidates. The candidates are ordered by last use, oldest first (never
// used since podsyncd started counts as oldest), then by first detection,
// then (ours, for a deterministic order) by ID. Then:
//
//   - with MaxAge set, once podsyncd has run longer than MaxAge, every
//     candidate unused for more than MaxAge is removed;
//   - the image filesystem's usage is 100 − available×100/capacity (the
//     mountpoint the runtime reports in ImageFsInfo, measured with statfs as
//     the kubelet's cadvisor does); at or above HighThresholdPercent, the
//     candidates at least MinAge old (since first detected) are removed in
//     order until capacity×(100−LowThresholdPercent)/100 − available bytes
//     (by the images' sizes) are freed. Falling short is a Warning
//     FreeDiskSpaceFailed node event with the kubelet's message; a zero
//     capacity is InvalidDiskCapacity.
//
// The records are in memory, as the kubelet's: after a restart every image
// is first detected again, so MinAge protects them all once more.
package imagegc
