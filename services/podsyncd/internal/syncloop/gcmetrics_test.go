package syncloop

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/microlet/microlet/services/podsyncd/internal/containergc"
)

// TestGCPassCounted: each pass counts once under its result, and what it
// removed adds up per object; a registry serves both families.
func TestGCPassCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newGCMetrics(reg)
	m.pass(containergc.Result{Containers: 2, Sandboxes: 1}, nil)
	m.pass(containergc.Result{Containers: 1, LogDirs: 3}, errors.New("one removal failed"))
	for _, c := range []struct {
		got  prometheus.Counter
		want float64
	}{
		{m.passes.WithLabelValues("success"), 1},
		{m.passes.WithLabelValues("error"), 1},
		{m.removed.WithLabelValues("container"), 3},
		{m.removed.WithLabelValues("sandbox"), 1},
		{m.removed.WithLabelValues("pod_log_dir"), 3},
	} {
		var d dto.Metric
		if err := c.got.Write(&d); err != nil {
			t.Fatal(err)
		}
		if v := d.GetCounter().GetValue(); v != c.want {
			t.Errorf("%s = %v, want %v", c.got.Desc(), v, c.want)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series := map[string]int{}
	for _, mf := range mfs {
		series[mf.GetName()] = len(mf.GetMetric())
	}
	want := map[string]int{"microlet_podsyncd_container_gc_passes_total": 2, "microlet_podsyncd_container_gc_removed_total": 3}
	for name, n := range want {
		if series[name] != n {
			t.Errorf("%s: %d series served, want %d", name, series[name], n)
		}
	}
}
