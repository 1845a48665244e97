// Package podruntime drives a CRI runtime for pods, the way the kubelet's
// kuberuntime manager does: it names and labels sandboxes and containers so a
// pod's runtime state can be found again after any restart (the labels are the
// only state), reads a pod's runtime status, computes what must change
// (ComputePodActions) and carries it out (SyncPod, KillPod), with CrashLoopBackOff,
// image pulls per imagePullPolicy and lifecycle hooks. rt and img are the
// CRI's runtime and image services as k8s.io/cri-client makes them
// (k8s.io/cri-api/pkg/apis), whose request timeout bounds every call.
//
//	svc, _ := criclient.Connect(ctx, endpoint, "", 2*time.Minute, log)
//	m := podruntime.NewManager(svc.Runtime, svc.Images, podruntime.Options{LogRoot: "/var/log/pods"})
//	st, _ := m.GetPodStatus(ctx, pod.UID)
//	res := m.SyncPod(ctx, pod, st)
package podruntime
