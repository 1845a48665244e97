package podsource

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Annotation keys the kubelet keeps on pods; their values are part of the
// API.
const (
	// SourceAnnotation names the pod's source (FileSource, HTTPSource,
	// APISource).
	SourceAnnotation = "kubernetes.io/config.source"
	// MirrorAnnotation marks a mirror pod, the API copy of a static pod; its
	// value is the static pod's config hash.
	MirrorAnnotation = corev1.MirrorPodAnnotationKey
	// FirstSeenAnnotation is when the pod's source first delivered it.
	FirstSeenAnnotation = "kubernetes.io/config.seen"
	// HashAnnotation is a static pod's config hash.
	HashAnnotation = "kubernetes.io/config.hash"
)

// Names of the pod sources, the values of SourceAnnotation.
const (
	// FileSource is a static pod from a manifest file or directory.
	FileSource = "file"
	// HTTPSource is a static pod from a manifest URL.
	HTTPSource = "http"
	// APISource is a pod from the API server.
	APISource = "api"
)

// Source returns pod's source and whether it has one.
func Source(pod *corev1.Pod) (string, bool) {
	s, ok := pod.Annotations[SourceAnnotation]
	return s, ok
}

// IsStatic reports whether pod came from a local source (file, http): it has
// a source annotation that is not APISource.
func IsStatic(pod *corev1.Pod) bool {
	s, ok := Source(pod)
	return ok && s != APISource
}

// IsMirror reports whether pod is a mirror pod: it has the mirror
// annotation, whatever its value.
func IsMirror(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[MirrorAnnotation]
	return ok
}

// FirstSeen is when pod's source first delivered it (FirstSeenAnnotation,
// RFC 3339 with nanoseconds); the zero time when it is missing or unreadable.
func FirstSeen(pod *corev1.Pod) time.Time {
	t, err := time.Parse(time.RFC3339Nano, pod.Annotations[FirstSeenAnnotation])
	if err != nil {
		return time.Time{}
	}
	return t
}
