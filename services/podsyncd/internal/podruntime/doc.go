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
//
// The files follow upstream's kuberuntime split: manager.go holds the
// Manager, SyncPod, KillPod and the remembered waiting reasons
// (kuberuntime_manager.go); actions.go computes what a sync must do
// (computePodActions); sandbox.go builds and creates sandboxes
// (kuberuntime_sandbox.go); container.go builds, starts and kills
// containers (kuberuntime_container.go); image.go pulls images per
// imagePullPolicy with the pull back-off (kuberuntime_image.go and the
// image manager); status.go reads a pod's runtime status.
//
// The prober (Health) and the node's addresses and allocatable resources
// (SetNodeInfo) come from the sync loop, which is built after the Manager
// and owns the pod workers the prober triggers, so they are installed once
// by syncloop.New before anything runs rather than passed to NewManager.
package podruntime
