package server_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/store"
	"github.com/microlet/microlet/services/statusd/internal/syncer"
)

// frozen is an informer that never runs: its store holds what the test put
// there, so the syncer sees a stale API copy deterministically.
type frozen struct{ toolscache.SharedIndexInformer }

func (frozen) HasSynced() bool { return true }

// The API copy the syncer holds is stale (the pod was recreated behind its
// back): the PATCH's metadata.uid precondition makes the API server refuse
// it (422 in 1.36), a live GET shows the new UID, and the old status is dropped without
// touching the new pod.
func TestConflictOnStaleCopy(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	old := e.apiPod(t, "stale", corev1.RestartPolicyAlways)
	grace := int64(0)
	if err := e.admin.CoreV1().Pods(e.ns).Delete(ctx, "stale", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old pod gone", func() error {
		if _, err := getPod(t, e.admin, e.ns, "stale"); !isNotFound(err) {
			return errorf("still there: %v", err)
		}
		return nil
	})
	fresh := e.apiPod(t, "stale", corev1.RestartPolicyAlways)

	inf := frozen{informers.NewSharedInformerFactory(e.nodeC, 0).Core().V1().Pods().Informer()}
	if err := inf.GetIndexer().Add(old); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "statusd.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	var sy *syncer.Syncer
	c := cache.New(st, cache.WithOnChange(func(uid string) { sy.Enqueue(uid) }))
	sy = syncer.New(e.nodeC, c, inf, syncer.WithLogger(testLogger(t)), syncer.WithReconcilePeriod(time.Hour))
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { sy.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()

	if _, err := c.SetPodStatus(old, runningStatus(4, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old status dropped after the conflict", func() error {
		if _, ok := c.Get(string(old.UID)); ok {
			return errorf("still cached")
		}
		return nil
	})
	// kube-apiserver refuses the mismatched metadata.uid with 422 (409 in
	// older versions); either proves the precondition was exercised.
	refused := counterValue(t, sy.Metrics().Errors.WithLabelValues("409")) + counterValue(t, sy.Metrics().Errors.WithLabelValues("422"))
	if refused < 1 {
		t.Fatalf("no refused patch counted: the precondition was not exercised")
	}
	if n := counterValue(t, sy.Metrics().LiveGets); n < 1 {
		t.Fatalf("no live GET after the conflict")
	}
	p, err := getPod(t, e.admin, e.ns, "stale")
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != fresh.UID || p.Status.Phase == corev1.PodRunning || restarts(p) == 4 {
		t.Fatalf("the new pod got the old pod's status: %+v", p.Status)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
