// Package eviction is the kubelet's eviction manager
// (pkg/kubelet/eviction) for podsyncd, and the one judge of node pressure:
// nodestatusd reports the conditions it holds (over podsyncd's
// GetNodePressure) and podsyncd's admission refuses pods by the same
// values.
//
// Every MonitoringPeriod (10 s) a pass reads the node's stats Summary
// (internal/stats), derives the signals (memory.available, nodefs.*,
// imagefs.*, pid.available) and judges the thresholds (internal/evictionapi)
// as the kubelet does: a threshold that evicted stays met until its minimum
// reclaim is available again; a soft threshold acts only once met for its
// grace period; a condition (MemoryPressure, DiskPressure, PIDPressure)
// holds until its thresholds have been clear for the transition period.
// When a threshold acts, the node is reclaimed first for disk signals (dead
// containers, then unused images), and if that does not clear every
// threshold the pods are ranked (usage above requests, priority, usage) and
// the first one that is not critical is evicted: grace period 0 for hard
// thresholds, min(pod's, evictionMaxPodGracePeriod) for soft ones, a
// Warning Evicted event with the kubelet's message and annotations. One pod
// per pass; the next pass waits for it to stop (at most 30 s).
//
//	m := eviction.New(eviction.Config{Thresholds: th, PressureTransitionPeriod: 5 * time.Minute},
//		eviction.Deps{Summary: summary, ActivePods: active, Evict: evict, ...})
//	go m.Run(ctx)
//	p := m.Pressure()            // conditions for GetNodePressure
//	ok, reason, msg := m.Admit(pod)
package eviction
