// Package podruntime drives a CRI runtime for pods, the way the kubelet's
// kuberuntime manager does: it names and labels sandboxes and containers so a
// pod's runtime state can be found again after any restart (the labels are the
// only state), reads a pod's runtime status, computes what must change
// (ComputePodActions) and carries it out (SyncPod, KillPod), with CrashLoopBackOff,
// image pulls per imagePullPolicy and lifecycle hooks.
//
//	m := podruntime.NewManager(rt, img, podruntime.Options{LogRoot: "/var/log/pods"})
//	st, _ := m.GetPodStatus(ctx, pod.UID)
//	res := m.SyncPod(ctx, pod, st)
package podruntime
