package eviction

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/microlet/microlet/internal/evictionapi"
)

// fsStats are the parts of a pod's disk usage a ranking counts, as the
// kubelet's fsStatsType.
type fsStats uint8

const (
	fsRoot         fsStats = 1 << iota // containers' writable layers
	fsLogs                             // containers' logs
	fsLocalVolumes                     // emptyDir (disk), configMap, gitRepo and hostPath volumes
)

// rankKind is how pods are ordered for a signal.
type rankKind uint8

const (
	rankMemory rankKind = iota
	rankPIDs
	rankDisk
)

// ranking says how to order pods for a signal: by memory, PIDs or disk,
// and for disk which usage and which resource (bytes or inodes).
type ranking struct {
	kind     rankKind
	fs       fsStats
	resource corev1.ResourceName
}

// rankings returns the ranking of every signal, the kubelet's
// buildSignalToRankFunc: with a dedicated image filesystem nodefs counts
// logs and local volumes and imagefs the writable layers; on one disk both
// count everything.
func rankings(dedicatedImageFs bool) map[evictionapi.Signal]ranking {
	all := fsRoot | fsLogs | fsLocalVolumes
	nodefs, imagefs := all, all
	if dedicatedImageFs {
		nodefs, imagefs = fsLogs|fsLocalVolumes, fsRoot
	}
	return map[evictionapi.Signal]ranking{
		evictionapi.SignalMemoryAvailable:   {kind: rankMemory},
		evictionapi.SignalPIDAvailable:      {kind: rankPIDs},
		evictionapi.SignalNodeFsAvailable:   {kind: rankDisk, fs: nodefs, resource: corev1.ResourceEphemeralStorage},
		evictionapi.SignalNodeFsInodesFree:  {kind: rankDisk, fs: nodefs, resource: evictionapi.ResourceInodes},
		evictionapi.SignalImageFsAvailable:  {kind: rankDisk, fs: imagefs, resource: corev1.ResourceEphemeralStorage},
		evictionapi.SignalImageFsInodesFree: {kind: rankDisk, fs: imagefs, resource: evictionapi.ResourceInodes},
	}
}

// candidate is a pod with what ranking compares, computed once per pass.
type candidate struct {
	pod     *corev1.Pod
	found   bool  // stats were found
	usage   int64 // working set, processes, or disk bytes/inodes
	request int64 // memory or ephemeral-storage request, subtracted from usage
	// exceeds says whether usage is above the request of the ranked
	// resource; for inodes that request is zero, while the ordering still
	// subtracts the ephemeral-storage request, as the kubelet's does.
	exceeds  bool
	priority int32
}

// rank orders pods for eviction, first to evict first, with the kubelet's
// comparisons: for memory, pods whose usage exceeds their request, then
// lower priority, then larger usage above the request; for PIDs, lower
// priority then more processes; for disk, like memory with the disk usage
// the ranking counts. Pods without stats go first. The sort is stable so
// equal pods keep the order they were given in.
func rank(pods []*corev1.Pod, stats statsFunc, r ranking) []*corev1.Pod {
	cs := make([]candidate, len(pods))
	for i, p := range pods {
		c := candidate{pod: p, priority: corev1helpers.PodPriority(p)}
		ps, ok := stats(p)
		c.found = ok
		if ok {
			switch r.kind {
			case rankMemory:
				if ps.Memory != nil {
					c.usage = u64(ps.Memory.WorkingSetBytes)
				}
				c.request = podRequest(p, corev1.ResourceMemory)
				c.exceeds = c.usage > c.request
			case rankPIDs:
				if ps.ProcessStats != nil {
					c.usage = u64(ps.ProcessStats.ProcessCount)
				}
			case rankDisk:
				c.usage = diskUsage(ps, p, r.fs, r.resource)
				c.request = podRequest(p, corev1.ResourceEphemeralStorage)
				if r.resource == corev1.ResourceEphemeralStorage {
					c.exceeds = c.usage > c.request
				} else {
					c.exceeds = c.usage > 0
				}
			}
		}
		cs[i] = c
	}
	slices.SortStableFunc(cs, func(a, b candidate) int {
		switch {
		case less(&a, &b, r.kind):
			return -1
		case less(&b, &a, r.kind):
			return 1
		}
		return 0
	})
	out := make([]*corev1.Pod, len(cs))
	for i := range cs {
		out[i] = cs[i].pod
	}
	return out
}

// less reports whether a is evicted before b.
func less(a, b *candidate, kind rankKind) bool {
	if a.found != b.found {
		return !a.found // no stats: evicted first
	}
	if kind != rankPIDs && a.exceeds != b.exceeds {
		return a.exceeds
	}
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	if !a.found {
		return false
	}
	if kind == rankPIDs {
		return a.usage > b.usage
	}
	return a.usage-a.request > b.usage-b.request
}

// podRequest is the pod's request of a resource as the kubelet's
// GetResourceRequestQuantity computes it (containers, init containers and
// sidecars, overhead).
func podRequest(pod *corev1.Pod, name corev1.ResourceName) int64 {
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	q, ok := reqs[name]
	if !ok {
		return 0
	}
	return q.Value()
}

// localVolume says whether the kubelet counts a volume's usage as the
// pod's local storage: hostPath and the local ephemeral kinds (gitRepo,
// disk-backed emptyDir, configMap).
func localVolume(v *corev1.Volume) bool {
	return v.HostPath != nil || v.GitRepo != nil || v.ConfigMap != nil ||
		(v.EmptyDir != nil && v.EmptyDir.Medium == corev1.StorageMediumDefault)
}

// diskUsage is the kubelet's podDiskUsage: the chosen parts of the pod's
// disk usage, in bytes or inodes.
func diskUsage(ps *statsapi.PodStats, pod *corev1.Pod, parts fsStats, res corev1.ResourceName) int64 {
	val := func(f *statsapi.FsStats) int64 {
		if f == nil {
			return 0
		}
		if res == evictionapi.ResourceInodes {
			return u64(f.InodesUsed)
		}
		return u64(f.UsedBytes)
	}
	var total int64
	for i := range ps.Containers {
		c := &ps.Containers[i]
		if parts&fsRoot != 0 {
			total += val(c.Rootfs)
		}
		if parts&fsLogs != 0 {
			total += val(c.Logs)
		}
	}
	if parts&fsLocalVolumes != 0 {
		for i := range pod.Spec.Volumes {
			v := &pod.Spec.Volumes[i]
			if !localVolume(v) {
				continue
			}
			for j := range ps.VolumeStats {
				if ps.VolumeStats[j].Name == v.Name {
					total += val(&ps.VolumeStats[j].FsStats)
					break
				}
			}
		}
	}
	return total
}
