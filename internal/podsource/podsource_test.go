package podsource

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Presence decides, as in the kubelet: an empty config.mirror value still
// marks a mirror pod, an empty config.source value is a static pod's.
func TestStaticAndMirror(t *testing.T) {
	for _, tc := range []struct {
		name           string
		ann            map[string]string
		static, mirror bool
	}{
		{"no annotations", nil, false, false},
		{"file", map[string]string{SourceAnnotation: FileSource}, true, false},
		{"http", map[string]string{SourceAnnotation: HTTPSource}, true, false},
		{"api", map[string]string{SourceAnnotation: APISource}, false, false},
		{"empty source", map[string]string{SourceAnnotation: ""}, true, false},
		{"mirror with hash", map[string]string{SourceAnnotation: APISource, MirrorAnnotation: "abc"}, false, true},
		{"mirror without value", map[string]string{MirrorAnnotation: ""}, false, true},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
		if got := IsStatic(p); got != tc.static {
			t.Errorf("%s: IsStatic = %v, want %v", tc.name, got, tc.static)
		}
		if got := IsMirror(p); got != tc.mirror {
			t.Errorf("%s: IsMirror = %v, want %v", tc.name, got, tc.mirror)
		}
	}
}
