// Package podsource is the vocabulary of where a pod came from, shared by
// podconfig (which stamps it), statusd, podsyncd and nodeapi (which read it):
// the kubelet's kubernetes.io/config.* annotation keys, the source names,
// and the static and mirror checks with the kubelet's semantics
// (pkg/kubelet/types: a pod is static when its config.source annotation is
// present and not "api", a mirror pod when its config.mirror annotation is
// present, whatever the values). k8s.io/kubelet does not export these; the
// mirror key is corev1.MirrorPodAnnotationKey.
//
//	if podsource.IsMirror(pod) { continue } // an API copy of a static pod
package podsource
