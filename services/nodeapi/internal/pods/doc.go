// Package pods answers "which pods does this node run?" for the kubelet API:
// the desired pods podconfig holds (mirror pods excluded, as the kubelet's pod
// manager excludes them) with the status statusd caches for each, which is what
// the kubelet's GetPods and GetPodByName return.
//
//	src := pods.NewSource(podconfigv1.NewPodConfigServiceClient(pcConn), statusdv1.NewStatusServiceClient(sdConn))
//	pod, err := src.Get(ctx, "default", "web-0") // errors.Is(err, pods.ErrNotFound) when absent
package pods
