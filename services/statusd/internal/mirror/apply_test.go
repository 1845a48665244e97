package mirror

import (
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/microlet/microlet/internal/podsource"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	podconfigclient "github.com/microlet/microlet/services/podconfig/client"
)

func raw(t *testing.T, name string, ann map[string]string) []byte {
	t.Helper()
	b, err := (&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The API source carries the mirror pod under the static pod's name; it must
// not replace or remove the static pod (the previous attempt's bug).
func TestApplyKeysStaticPodsBySource(t *testing.T) {
	inf := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Pods().Informer()
	m := New(nil, nil, "n", inf)
	static := raw(t, "etcd-n", map[string]string{podsource.SourceAnnotation: "file", podsource.HashAnnotation: "h"})
	mirrorPod := raw(t, "etcd-n", map[string]string{podsource.SourceAnnotation: "api", podsource.MirrorAnnotation: "h"})
	steps := []struct {
		resp *podconfigv1.WatchResponse
		want int
	}{
		{&podconfigv1.WatchResponse{Sequence: 1, Resync: true, Updates: []*podconfigv1.PodUpdate{
			{Op: podconfigv1.Operation_OPERATION_SET, Source: "file", Pods: [][]byte{static}},
			{Op: podconfigv1.Operation_OPERATION_SET, Source: "api"},
		}}, 1},
		{&podconfigv1.WatchResponse{Sequence: 2, Updates: []*podconfigv1.PodUpdate{{Op: podconfigv1.Operation_OPERATION_ADD, Source: "api", Pods: [][]byte{mirrorPod}}}}, 1},
		{&podconfigv1.WatchResponse{Sequence: 3, Updates: []*podconfigv1.PodUpdate{{Op: podconfigv1.Operation_OPERATION_REMOVE, Source: "api", Pods: [][]byte{mirrorPod}}}}, 1},
		{&podconfigv1.WatchResponse{Sequence: 4, Updates: []*podconfigv1.PodUpdate{{Op: podconfigv1.Operation_OPERATION_REMOVE, Source: "file", Pods: [][]byte{static}}}}, 0},
		{&podconfigv1.WatchResponse{Sequence: 5, Updates: []*podconfigv1.PodUpdate{{Op: podconfigv1.Operation_OPERATION_ADD, Source: "http", Pods: [][]byte{static}}}}, 1},
		{&podconfigv1.WatchResponse{Sequence: 9, Resync: true}, 0},
	}
	for i, s := range steps {
		m.Apply(podconfigclient.Decode(s.resp, slog.Default()))
		got, ready := m.Desired()
		if !ready || len(got) != s.want {
			t.Fatalf("step %d: %d static pods (ready %v), want %d", i, len(got), ready, s.want)
		}
	}
}
