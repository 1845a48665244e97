package nodeshutdown

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// Group is one priority group of a shutdown: its grace period and the pods
// that fall in it.
type Group struct {
	GracePeriodByPriority
	Pods []*corev1.Pod
}

// GroupByPriority puts each pod in the group of the highest entry whose
// priority is at or below the pod's; pods below the lowest entry go to the
// lowest, pods above the highest to the highest (the kubelet's
// groupByPriority). periods must be sorted from low to high (Periods).
// A pod without spec.priority has priority 0.
func GroupByPriority(periods []GracePeriodByPriority, pods []*corev1.Pod) []Group {
	groups := make([]Group, len(periods))
	for i, p := range periods {
		groups[i].GracePeriodByPriority = p
	}
	if len(groups) == 0 {
		return groups
	}
	for _, pod := range pods {
		var prio int32
		if pod.Spec.Priority != nil {
			prio = *pod.Spec.Priority
		}
		// First group whose priority is >= the pod's ...
		i := sort.Search(len(groups), func(i int) bool { return groups[i].Priority >= prio })
		switch {
		case i == len(groups):
			i = len(groups) - 1 // above every entry
		case i > 0 && groups[i].Priority > prio:
			i-- // ... unless it is above the pod: the one below it
		}
		groups[i].Pods = append(groups[i].Pods, pod)
	}
	return groups
}

// graceFor is the grace period a pod gets in its group: the group's, or
// the pod's own terminationGracePeriodSeconds when that is shorter.
func graceFor(g Group, pod *corev1.Pod) int64 {
	grace := g.ShutdownGracePeriodSeconds
	if t := pod.Spec.TerminationGracePeriodSeconds; t != nil && *t <= grace {
		grace = *t
	}
	return grace
}
