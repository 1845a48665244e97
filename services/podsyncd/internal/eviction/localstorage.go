package eviction

import (
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// immediateGracePeriod is the grace period of a pod evicted for a hard
// threshold or a local storage limit (the kubelet's
// immediateEvictionGracePeriodSeconds).
const immediateGracePeriod = 1

// The messages of local storage evictions.
const (
	emptyDirMessageFmt           = "Usage of EmptyDir volume %q exceeds the limit %q. "
	podEphemeralMessageFmt       = "Pod ephemeral local storage usage exceeds the total limit of containers %s. "
	containerEphemeralMessageFmt = "Container %s exceeded its local ephemeral storage limit %q. "
)

// localStorageEviction is the kubelet's local storage capacity isolation:
// every active pod with stats is checked for, in order, an emptyDir over
// its sizeLimit, ephemeral storage over the pod's limit (the sum of its
// containers' limits), and a container whose writable layer and logs
// exceed its own limit; the first found evicts the pod at once, without
// a DisruptionTarget condition. It returns the pods evicted.
func (m *Manager) localStorageEviction(pods []*corev1.Pod, stats statsFunc, log *slog.Logger) []*corev1.Pod {
	var evicted []*corev1.Pod
	for _, pod := range pods {
		ps, ok := stats(pod)
		if !ok {
			continue
		}
		signal, msg := m.localStorageViolation(pod, ps)
		if msg == "" {
			continue
		}
		if m.evict(pod, immediateGracePeriod, msg, nil, false, log) {
			m.deps.Metrics.Evicted(signal)
			evicted = append(evicted, pod)
		}
	}
	return evicted
}

// localStorageViolation returns the signal and message of pod's first
// local storage violation, "" when there is none.
func (m *Manager) localStorageViolation(pod *corev1.Pod, ps *statsapi.PodStats) (signal, message string) {
	if msg := emptyDirViolation(pod, ps); msg != "" {
		return kubeletmetrics.SignalEmptyDirFsLimit, msg
	}
	if msg := podEphemeralViolation(pod, ps); msg != "" {
		return kubeletmetrics.SignalEphemeralPodFsLimit, msg
	}
	if msg := containerEphemeralViolation(pod, ps, m.dedicated); msg != "" {
		return kubeletmetrics.SignalEphemeralContainerFsLimit, msg
	}
	return "", ""
}

// emptyDirViolation finds the first emptyDir volume (of either medium)
// whose measured usage exceeds its positive sizeLimit.
func emptyDirViolation(pod *corev1.Pod, ps *statsapi.PodStats) string {
	for _, v := range pod.Spec.Volumes {
		if v.EmptyDir == nil || v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() <= 0 {
			continue
		}
		for _, vs := range ps.VolumeStats { // a few entries: no map per pod and pass
			if vs.Name == v.Name && vs.UsedBytes != nil && v.EmptyDir.SizeLimit.CmpInt64(u64(vs.UsedBytes)) < 0 {
				return fmt.Sprintf(emptyDirMessageFmt, v.Name, v.EmptyDir.SizeLimit.String())
			}
		}
	}
	return ""
}

// podEphemeralViolation compares the pod's ephemeral storage (writable
// layers, logs, disk-backed emptyDirs, etc-hosts) with its ephemeral
// storage limit, when it has one.
func podEphemeralViolation(pod *corev1.Pod, ps *statsapi.PodStats) string {
	if !anyEphemeralLimit(pod) {
		return "" // PodLimits would have none; it is the costly part of a pass
	}
	limit, ok := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})[corev1.ResourceEphemeralStorage]
	if !ok {
		return ""
	}
	var used int64
	if ps.EphemeralStorage != nil {
		used = u64(ps.EphemeralStorage.UsedBytes)
	}
	if limit.CmpInt64(used) < 0 {
		return fmt.Sprintf(podEphemeralMessageFmt, limit.String())
	}
	return ""
}

// anyEphemeralLimit says whether a container or init container of pod
// has an ephemeral-storage limit, without which the pod has none.
func anyEphemeralLimit(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if _, ok := cs[i].Resources.Limits[corev1.ResourceEphemeralStorage]; ok {
				return true
			}
		}
	}
	return false
}

// containerEphemeralViolation finds the first container (in the stats'
// order) whose logs, and writable layer unless the image filesystem is
// another device, exceed its non-zero ephemeral storage limit.
func containerEphemeralViolation(pod *corev1.Pod, ps *statsapi.PodStats, dedicatedImageFs bool) string {
	for _, cs := range ps.Containers {
		limit, ok := containerEphemeralLimit(pod, cs.Name)
		if !ok {
			continue
		}
		used := fsUsed(cs.Logs)
		if !dedicatedImageFs {
			used += fsUsed(cs.Rootfs)
		}
		if limit.CmpInt64(used) < 0 {
			return fmt.Sprintf(containerEphemeralMessageFmt, cs.Name, limit.String())
		}
	}
	return ""
}

// containerEphemeralLimit is the non-zero ephemeral-storage limit of the
// regular container name (init and ephemeral containers are not checked).
func containerEphemeralLimit(pod *corev1.Pod, name string) (resource.Quantity, bool) {
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; c.Name == name {
			l, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]
			return l, ok && l.Value() != 0
		}
	}
	return resource.Quantity{}, false
}

func fsUsed(f *statsapi.FsStats) int64 {
	if f == nil {
		return 0
	}
	return u64(f.UsedBytes)
}
