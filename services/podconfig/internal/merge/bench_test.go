package merge

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

func BenchmarkMergeUnchanged1000(b *testing.B) {
	pods := make([]*corev1.Pod, 1000)
	for i := range pods {
		pods[i] = pod(fmt.Sprint(i), withUID(fmt.Sprint(i)))
		pods[i].UID = types.UID(fmt.Sprint(i))
	}
	s := New()
	s.Merge("file", pods)
	b.ResetTimer()
	for b.Loop() {
		s.Merge("file", pods)
	}
}
