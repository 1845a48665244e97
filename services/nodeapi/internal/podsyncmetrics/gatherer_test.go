package podsyncmetrics

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/promwire"
	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// fakePodsync answers GetMetrics from a registry of its own, or hangs
// until the call's deadline when hang is set.
type fakePodsync struct {
	podsyncv1.UnimplementedPodSyncServiceServer
	reg  *prometheus.Registry
	hang atomic.Bool
}

func (f *fakePodsync) GetMetrics(ctx context.Context, req *podsyncv1.GetMetricsRequest) (*podsyncv1.GetMetricsResponse, error) {
	if f.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	mfs, err := f.reg.Gather()
	if err != nil {
		return nil, err
	}
	b, err := promwire.Encode(mfs)
	return &podsyncv1.GetMetricsResponse{Families: b}, err
}

func scrape(t *testing.T, h *httptest.Server) testenv.Metrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := testenv.ScrapeMetrics(ctx, h.URL)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGatherer: podsyncd's families are served beside nodeapi's own; with
// podsyncd gone or hung the scrape still answers with nodeapi's own and
// counts the failure.
func TestGatherer(t *testing.T) {
	dir := testenv.ShortDir(t, "psm")
	sock := filepath.Join(dir, "podsyncd.sock")
	remote := prometheus.NewRegistry()
	running := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_running_pods", Help: "Pods."})
	remote.MustRegister(running)
	running.Set(3)
	fake := &fakePodsync{reg: remote}
	servicetest.Serve(t, sock, func(s *grpc.Server) { podsyncv1.RegisterPodSyncServiceServer(s, fake) })

	cc, err := grpcclient.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	own := prometheus.NewRegistry()
	errs := NewErrors(own)
	g := New(podsyncv1.NewPodSyncServiceClient(cc), podsyncv1.MetricsSet_METRICS_SET_KUBELET,
		WithErrors(errs), WithTimeout(500*time.Millisecond), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	h := httptest.NewServer(promhttp.HandlerFor(prometheus.Gatherers{own, g}, promhttp.HandlerOpts{}))
	defer h.Close()

	m := scrape(t, h)
	if got := m.Sum("kubelet_running_pods", nil); got != 3 {
		t.Fatalf("kubelet_running_pods = %v, want podsyncd's 3", got)
	}
	if got := m.Sum("microlet_nodeapi_podsyncd_metrics_errors_total", nil); got != 0 {
		t.Fatalf("errors = %v before any failure", got)
	}

	fake.hang.Store(true)
	m = scrape(t, h)
	if m["kubelet_running_pods"] != nil {
		t.Fatal("a hung podsyncd's families were served")
	}
	// The count shows from the next scrape on (own is gathered first).
	if got := testutil.ToFloat64(errs.WithLabelValues("kubelet")); got != 1 {
		t.Fatalf("errors{set=kubelet} = %v after a hung call, want 1", got)
	}

	// A socket nobody answers on: podsyncd restarting.
	down := New(podsyncv1.NewPodSyncServiceClient(dialNowhere(t, dir)), podsyncv1.MetricsSet_METRICS_SET_PROBES,
		WithErrors(errs), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	h2 := httptest.NewServer(promhttp.HandlerFor(prometheus.Gatherers{own, down}, promhttp.HandlerOpts{}))
	defer h2.Close()
	m = scrape(t, h2)
	if m["microlet_nodeapi_podsyncd_metrics_errors_total"] == nil {
		t.Fatal("nodeapi's own metrics not served with podsyncd down")
	}
	if got := testutil.ToFloat64(errs.WithLabelValues("probes")); got != 1 {
		t.Fatalf("errors{set=probes} = %v with podsyncd down, want 1", got)
	}
}

func dialNowhere(t *testing.T, dir string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpcclient.Dial(filepath.Join(dir, "nobody.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func TestSetName(t *testing.T) {
	if got := SetName(podsyncv1.MetricsSet_METRICS_SET_KUBELET); got != "kubelet" {
		t.Errorf("SetName(KUBELET) = %q", got)
	}
	if got := SetName(podsyncv1.MetricsSet_METRICS_SET_PROBES); got != "probes" {
		t.Errorf("SetName(PROBES) = %q", got)
	}
}
