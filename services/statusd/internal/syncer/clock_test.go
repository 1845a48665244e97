package syncer

import (
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/store"
)

// TestStoredTimesAcrossARestartWithTheClockBack: statusd records a status
// and its pod's start time, then restarts on a clock stepped back an hour.
// The stored times come back as they were (the start time is not moved to
// the new clock, so activeDeadlineSeconds still counts from it); a newer
// status still makes a new version; and the sync latency measured from the
// stored change time, which now reads in the future, is observed as zero,
// not as minus an hour.
func TestStoredTimesAcrossARestartWithTheClockBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "statusd.db")
	written := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}}

	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New(st, cache.WithClock(testingclock.NewFakeClock(written)))
	if _, err := c.SetPodStatus(pod, &corev1.PodStatus{Phase: corev1.PodPending}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	clk := testingclock.NewFakeClock(written.Add(-time.Hour))
	st, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	c = cache.New(st, cache.WithClock(clk))
	if n, err := c.Load(); err != nil || n != 1 {
		t.Fatalf("Load = %d, %v", n, err)
	}
	e, ok := c.Get(string(pod.UID))
	if !ok || !e.Changed.Equal(written) || e.Status.StartTime == nil || !e.Status.StartTime.Time.Equal(written) {
		t.Fatalf("after the restart: entry %v, changed %v, start time %v; want both %v", ok, e.Changed, e.Status.StartTime, written)
	}
	v, err := c.SetPodStatus(pod, &corev1.PodStatus{Phase: corev1.PodRunning})
	if err != nil || v != e.Version+1 {
		t.Fatalf("a newer status after the step back: version %d, %v; want %d", v, err, e.Version+1)
	}
	if e, _ = c.Get(string(pod.UID)); !e.Status.StartTime.Time.Equal(written) {
		t.Fatalf("start time moved to %v", e.Status.StartTime)
	}

	client := fake.NewClientset()
	s := New(client, c, informers.NewSharedInformerFactory(client, 0).Core().V1().Pods().Informer(), WithClock(clk))
	s.done(&e)
	var m dto.Metric
	if err := s.metrics.SyncLatency.Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0 {
		t.Fatalf("sync latency: %d samples summing to %v s, want one of 0 s", h.GetSampleCount(), h.GetSampleSum())
	}
}
