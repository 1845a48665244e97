package eviction

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/microlet/microlet/internal/evictionapi"
)

// observation is one signal measured: what is available of what capacity.
type observation struct {
	available, capacity int64
	time                time.Time
}

// observations are the signals measured in one Summary.
type observations map[evictionapi.Signal]observation

// statsFunc finds a pod's stats in the Summary.
type statsFunc func(pod *corev1.Pod) (*statsapi.PodStats, bool)

func u64(p *uint64) int64 {
	if p == nil {
		return 0
	}
	if *p > 1<<62 {
		return 1 << 62
	}
	return int64(*p)
}

// observe derives the signals from a Summary as the kubelet's
// makeSignalObservations does: memory.available is the node's available
// memory (capacity less working set) of capacity available + working set;
// nodefs from the node's filesystem; imagefs from the runtime's image
// filesystem; pid.available is the PID limit less the running processes.
func observe(s *statsapi.Summary) (observations, statsFunc) {
	byUID := make(map[string]*statsapi.PodStats, len(s.Pods))
	for i := range s.Pods {
		byUID[s.Pods[i].PodRef.UID] = &s.Pods[i]
	}
	stats := func(pod *corev1.Pod) (*statsapi.PodStats, bool) {
		ps, ok := byUID[string(pod.UID)]
		return ps, ok
	}
	out := observations{}
	if m := s.Node.Memory; m != nil && m.AvailableBytes != nil && m.WorkingSetBytes != nil {
		out[evictionapi.SignalMemoryAvailable] = observation{
			available: u64(m.AvailableBytes), capacity: u64(m.AvailableBytes) + u64(m.WorkingSetBytes), time: m.Time.Time}
	}
	fs := func(avail, free evictionapi.Signal, f *statsapi.FsStats) {
		if f == nil {
			return
		}
		if f.AvailableBytes != nil && f.CapacityBytes != nil {
			out[avail] = observation{available: u64(f.AvailableBytes), capacity: u64(f.CapacityBytes), time: f.Time.Time}
		}
		if f.InodesFree != nil && f.Inodes != nil {
			out[free] = observation{available: u64(f.InodesFree), capacity: u64(f.Inodes), time: f.Time.Time}
		}
	}
	fs(evictionapi.SignalNodeFsAvailable, evictionapi.SignalNodeFsInodesFree, s.Node.Fs)
	if s.Node.Runtime != nil {
		fs(evictionapi.SignalImageFsAvailable, evictionapi.SignalImageFsInodesFree, s.Node.Runtime.ImageFs)
	}
	if r := s.Node.Rlimit; r != nil && r.MaxPID != nil && r.NumOfRunningProcesses != nil {
		out[evictionapi.SignalPIDAvailable] = observation{
			available: *r.MaxPID - *r.NumOfRunningProcesses, capacity: *r.MaxPID, time: r.Time.Time}
	}
	return out, stats
}

// limit is the threshold's value for the observed capacity, raised by the
// minimum reclaim when minReclaim is set (the kubelet's thresholdsMet with
// enforceMinReclaim).
func limit(t evictionapi.Threshold, o observation, minReclaim bool) int64 {
	v := t.Value.Of(o.capacity)
	if minReclaim && t.MinReclaim != nil {
		v += t.MinReclaim.Of(o.capacity)
	}
	return v
}

// thresholdsMet returns the thresholds whose signal is below their value.
func thresholdsMet(ts []evictionapi.Threshold, obs observations, minReclaim bool) []evictionapi.Threshold {
	var out []evictionapi.Threshold
	for _, t := range ts {
		o, ok := obs[t.Signal]
		if !ok {
			continue
		}
		if limit(t, o, minReclaim) > o.available {
			out = append(out, t)
		}
	}
	return out
}

func hasThreshold(ts []evictionapi.Threshold, t evictionapi.Threshold) bool {
	for _, x := range ts {
		if x.Same(t) {
			return true
		}
	}
	return false
}

func mergeThresholds(a, b []evictionapi.Threshold) []evictionapi.Threshold {
	for _, t := range b {
		if !hasThreshold(a, t) {
			a = append(a, t)
		}
	}
	return a
}
