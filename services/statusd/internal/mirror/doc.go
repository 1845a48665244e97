// Package mirror keeps a mirror pod in the API server for every static pod of
// the node (upstream pkg/kubelet/pod/mirror_client.go plus the kubelet's
// mirror bookkeeping): created with the kubernetes.io/config.mirror
// annotation set to the static pod's config hash and a controller owner
// reference to the Node, recreated when deleted, replaced when the hash no
// longer matches, deleted when the static pod leaves.
//
// The static pods come from podconfig's Watch stream through podconfig's
// client package (resumed after a disconnect, with backoff). Static pods are keyed by their
// source: podconfig also delivers each mirror pod through its "api" source
// under the static pod's own name, so a name-keyed set would see the static
// pod vanish and reappear with every API update.
//
//	m := mirror.New(client, podconfigv1.NewPodConfigServiceClient(cc), nodeName, podInformer)
//	go m.Run(ctx)
package mirror
