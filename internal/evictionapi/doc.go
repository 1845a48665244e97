// Package evictionapi holds the kubelet's eviction vocabulary that more than
// one service needs: the signals (memory.available, nodefs.available, ...),
// thresholds with their hard/soft grace periods and minimum reclaims, the
// kubelet's Linux --eviction-hard defaults, and the parser of the
// evictionHard / evictionSoft / evictionSoftGracePeriod /
// evictionMinimumReclaim maps with upstream's rules (pkg/kubelet/eviction
// ParseThresholdConfig). podsyncd's eviction manager judges them; nodestatusd
// only subtracts the hard memory and nodefs thresholds from allocatable.
//
//	th, err := evictionapi.Parse(evictionapi.Config{Hard: evictionapi.DefaultEvictionHard})
//	for _, t := range th {
//		limit := t.Value.Of(capacity) // bytes (or inodes, PIDs) that must stay available
//	}
package evictionapi
