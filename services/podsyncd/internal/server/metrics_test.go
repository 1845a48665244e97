package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/microlet/microlet/internal/promwire"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// TestGetMetrics: each set decodes to its families; no set is refused
// with InvalidArgument naming the field.
func TestGetMetrics(t *testing.T) {
	s := New()
	s.metrics.SetNodeName("node-a")
	names := func(set podsyncv1.MetricsSet) map[string]bool {
		resp, err := s.GetMetrics(context.Background(), &podsyncv1.GetMetricsRequest{Set: set})
		if err != nil {
			t.Fatal(err)
		}
		mfs, err := promwire.Decode(resp.GetFamilies())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, mf := range mfs {
			out[mf.GetName()] = true
		}
		return out
	}
	kubelet := names(podsyncv1.MetricsSet_METRICS_SET_KUBELET)
	if !kubelet["kubelet_node_name"] || !kubelet["kubelet_running_pods"] {
		t.Errorf("kubelet set %v: want kubelet_node_name and kubelet_running_pods", kubelet)
	}
	for name := range kubelet {
		if name == "process_start_time_seconds" || name == "go_goroutines" {
			t.Errorf("kubelet set has %s: nodeapi serves its own", name)
		}
	}
	if probes := names(podsyncv1.MetricsSet_METRICS_SET_PROBES); !probes["process_start_time_seconds"] || probes["kubelet_node_name"] {
		t.Errorf("probes set %v: want process_start_time_seconds and no kubelet_*", probes)
	}
	_, err := s.GetMetrics(context.Background(), &podsyncv1.GetMetricsRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no set: %v, want InvalidArgument", err)
	}
}

// BenchmarkGetMetrics: one scrape's podsyncd side for a full node (110
// pods, each with a readiness and a liveness probe): gather both sets and
// encode them.
func BenchmarkGetMetrics(b *testing.B) {
	s := New()
	for i := range 110 {
		pod := fmt.Sprintf("pod-%d", i)
		for _, kind := range []string{"Readiness", "Liveness"} {
			s.metrics.Probed(kubeletmetrics.ProbeTarget{Kind: kind, Namespace: "default", Pod: pod, PodUID: pod + "-uid", Container: "main"},
				kubeletmetrics.ProbeSuccessful, time.Millisecond)
		}
		s.metrics.PodWorkerDone(kubeletmetrics.OpSync, time.Millisecond)
	}
	var bytes int
	for b.Loop() {
		for _, set := range []podsyncv1.MetricsSet{podsyncv1.MetricsSet_METRICS_SET_KUBELET, podsyncv1.MetricsSet_METRICS_SET_PROBES} {
			resp, err := s.GetMetrics(context.Background(), &podsyncv1.GetMetricsRequest{Set: set})
			if err != nil {
				b.Fatal(err)
			}
			bytes += len(resp.GetFamilies())
		}
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/scrape")
}
