package promwire

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestRoundTrip(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kubelet_evictions", Help: "Evictions."}, []string{"eviction_signal"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kubelet_pod_start_duration_seconds", Help: "Starts.", Buckets: []float64{1, 2}})
	reg.MustRegister(c, h)
	c.WithLabelValues("memory.available").Add(3)
	h.Observe(1.5)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	b, err := Encode(mfs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP kubelet_evictions Evictions.
# TYPE kubelet_evictions counter
kubelet_evictions{eviction_signal="memory.available"} 3
# HELP kubelet_pod_start_duration_seconds Starts.
# TYPE kubelet_pod_start_duration_seconds histogram
kubelet_pod_start_duration_seconds_bucket{le="1"} 0
kubelet_pod_start_duration_seconds_bucket{le="2"} 1
kubelet_pod_start_duration_seconds_bucket{le="+Inf"} 1
kubelet_pod_start_duration_seconds_sum 1.5
kubelet_pod_start_duration_seconds_count 1
`
	decoded := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return got, nil })
	if err := testutil.GatherAndCompare(decoded, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(nil); err != nil || len(got) != 0 {
		t.Fatalf("Decode(nil) = %v, %v; want nothing", got, err)
	}
	if _, err := Decode(b[:len(b)-3]); err == nil || !strings.Contains(err.Error(), "metric family 2") {
		t.Fatalf("truncated input: err = %v, want one naming family 2", err)
	}
}

// FuzzDecode: whatever podsyncd (or anyone on its socket) sends, Decode
// returns families or an error, never panics.
func FuzzDecode(f *testing.F) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "kubelet_running_pods", Help: "Pods."})
	reg.MustRegister(g)
	mfs, _ := reg.Gather()
	b, _ := Encode(mfs)
	f.Add(b)
	f.Add([]byte{0x05, 0x0a})
	f.Fuzz(func(t *testing.T, in []byte) {
		_, _ = Decode(in)
	})
}
