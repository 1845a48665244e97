package bench

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/store"
	"github.com/microlet/microlet/services/statusd/internal/syncer"

	"github.com/microlet/microlet/services/statusd/bench/upstream"
)

// setFunc hands pod i's new status to the implementation under test; it
// returns once the implementation has accepted it (for statusd: persisted).
type setFunc func(i int, st *corev1.PodStatus) error

// startStatusd runs statusd's cache, store and syncer as the service wires
// them, with an informer of the node's pods; it stops when ctx ends.
func startStatusd(ctx context.Context, t testing.TB, nc kubernetes.Interface, pods []*corev1.Pod, workers int) (setFunc, func()) {
	st, err := store.Open(filepath.Join(t.TempDir(), "statusd.db"))
	if err != nil {
		t.Fatal(err)
	}
	var sy atomic.Pointer[syncer.Syncer]
	c := cache.New(st, cache.WithOnChange(func(uid string) {
		if x := sy.Load(); x != nil {
			x.Enqueue(uid)
		}
	}))
	factory := informers.NewSharedInformerFactoryWithOptions(nc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	opts := []syncer.Option{syncer.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if workers > 0 {
		opts = append(opts, syncer.WithWorkers(workers))
	}
	x := syncer.New(nc, c, factory.Core().V1().Pods().Informer(), opts...)
	sy.Store(x)
	ctx, cancel := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	done := make(chan struct{})
	go func() { x.Run(ctx); close(done) }()
	set := func(i int, s *corev1.PodStatus) error { _, err := c.SetPodStatus(pods[i], s); return err }
	return set, func() {
		cancel()
		<-done
		factory.Shutdown()
		_ = st.Close()
	}
}

// startUpstream runs k8s.io/kubernetes/pkg/kubelet/status's manager.
func startUpstream(ctx context.Context, nc kubernetes.Interface, pods []*corev1.Pod) (setFunc, func()) {
	ctx, cancel := context.WithCancel(ctx)
	m := upstream.New(nc, pods)
	m.Start(ctx)
	return func(i int, s *corev1.PodStatus) error { m.SetPodStatus(pods[i], s); return nil }, cancel
}

// startRaw is no status manager at all: the caller's goroutine sends one
// precomputed strategic merge patch of pods/status and waits for the answer.
// Driven by one writer per pod it measures how many status writes per
// second the API server itself sustains: the ceiling for any status manager.
func startRaw(nc kubernetes.Interface, pods []*corev1.Pod) (setFunc, func()) {
	set := func(i int, s *corev1.PodStatus) error {
		p := pods[i]
		data, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"uid": p.UID},
			"status":   map[string]any{"phase": s.Phase, "containerStatuses": s.ContainerStatuses},
		})
		if err != nil {
			return err
		}
		_, err = nc.CoreV1().Pods(p.Namespace).Patch(context.Background(), p.Name, types.StrategicMergePatchType, data, metav1.PatchOptions{}, "status")
		return err
	}
	return set, func() {}
}
