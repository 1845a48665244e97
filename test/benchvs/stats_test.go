package benchvs

import (
	"math"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
)

func secs(xs ...float64) []time.Duration {
	out := make([]time.Duration, len(xs))
	for i, x := range xs {
		out[i] = time.Duration(x * float64(time.Second))
	}
	return out
}

func TestPercentiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"none", nil, Latency{}},
		{"one", secs(2), Latency{N: 1, P50: 2, P90: 2, P99: 2, Max: 2}},
		// Nearest rank of 3: p50 is the 2nd, p90 and p99 the 3rd.
		{"three unsorted", secs(3, 1, 2), Latency{N: 3, P50: 2, P90: 3, P99: 3, Max: 3}},
		// Of 10: p50 the 5th, p90 the 9th, p99 the 10th.
		{"ten", secs(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), Latency{N: 10, P50: 5, P90: 9, P99: 10, Max: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentiles(tc.in); got != tc.want {
				t.Errorf("Percentiles = %+v, want %+v", got, tc.want)
			}
		})
	}
	// Of 200 values 1..200: p99 is the 198th, not the maximum.
	var many []float64
	for i := 200; i >= 1; i-- {
		many = append(many, float64(i))
	}
	if got := Percentiles(secs(many...)); got.P50 != 100 || got.P90 != 180 || got.P99 != 198 || got.Max != 200 {
		t.Errorf("Percentiles(1..200) = %+v, want p50 100, p90 180, p99 198, max 200", got)
	}
	in := secs(3, 1, 2)
	Percentiles(in)
	if in[0] != 3*time.Second {
		t.Error("Percentiles sorted its argument in place")
	}
}

func TestThroughput(t *testing.T) {
	t0 := time.Unix(100, 0)
	if got := Throughput(10, t0, t0.Add(4*time.Second)); got != 2.5 {
		t.Errorf("10 pods in 4 s = %v pods/s, want 2.5", got)
	}
	if got := Throughput(10, t0, t0); got != 0 {
		t.Errorf("empty span = %v, want 0", got)
	}
	if got := Throughput(0, t0, t0.Add(time.Second)); got != 0 {
		t.Errorf("no pods = %v, want 0", got)
	}
}

const exposition = `# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 12
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="",verb="GET",version=""} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="GET",version="v1"} 4
# TYPE apiserver_request_duration_seconds_count counter
apiserver_request_duration_seconds_count{verb="GET",resource="nodes"} 99
`

func TestRequestCounts(t *testing.T) {
	m, err := testenv.ParseMetrics([]byte(exposition))
	if err != nil {
		t.Fatal(err)
	}
	got := RequestCounts(m)
	want := map[string]float64{"PATCH pods/status": 8, "PUT leases": 12, "GET (non-resource)": 3, "GET nodes": 4}
	if len(got) != len(want) {
		t.Fatalf("RequestCounts = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("RequestCounts[%q] = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

func TestPerMinuteAndTotals(t *testing.T) {
	before := map[string]float64{"PUT leases": 10, "GET nodes": 5, "PATCH pods/status": 2}
	after := map[string]float64{"PUT leases": 13, "GET nodes": 5, "PATCH pods/status": 4, "POST events": 1}
	got := PerMinute(before, after, 30*time.Second)
	want := map[string]float64{"PUT leases": 6, "PATCH pods/status": 4, "POST events": 2}
	if len(got) != len(want) {
		t.Fatalf("PerMinute = %v, want %v (unchanged keys left out)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("PerMinute[%q] = %v, want %v", k, got[k], v)
		}
	}
	if got := PerMinute(before, after, 0); len(got) != 0 {
		t.Errorf("PerMinute over no time = %v, want empty", got)
	}
	all, writes := Totals(map[string]float64{"PUT leases": 6, "GET nodes": 1, "WATCH pods": 2, "PATCH pods/status": 4, "DELETE pods": 1})
	if all != 14 || writes != 11 {
		t.Errorf("Totals = %v, %v, want 14, 11", all, writes)
	}
}

func TestCPUSeconds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []map[int]float64
		want    float64
	}{
		{"one sample", []map[int]float64{{1: 5}}, 0},
		{"two processes", []map[int]float64{{1: 5, 2: 1}, {1: 6, 2: 1.5}, {1: 7.5, 2: 2}}, 3.5},
		// Process 3 started after the first sample: all of its time counts.
		{"started in the window", []map[int]float64{{1: 5}, {1: 5, 3: 0.25}, {1: 6, 3: 0.5}}, 1.5},
		// Process 2 exited: counted up to its last sample.
		{"exited in the window", []map[int]float64{{1: 5, 2: 1}, {1: 5, 2: 1.5}, {1: 6}}, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CPUSeconds(tc.samples); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("CPUSeconds = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMeanMax(t *testing.T) {
	if m, x := MeanMax([]float64{1, 5, 3}); m != 3 || x != 5 {
		t.Errorf("MeanMax = %v, %v, want 3, 5", m, x)
	}
	if m, x := MeanMax(nil); m != 0 || x != 0 {
		t.Errorf("MeanMax(nil) = %v, %v", m, x)
	}
}

func TestParseStatAndTree(t *testing.T) {
	comm, ppid, ok := parseStat("42 (a (b) c) S 7 42 42 0 -1")
	if !ok || comm != "a (b) c" || ppid != 7 {
		t.Errorf("parseStat = %q, %d, %v", comm, ppid, ok)
	}
	if _, _, ok := parseStat("garbage"); ok {
		t.Error("parseStat accepted garbage")
	}
	// 10 is microlet's supervisor: 11 podsyncd, 12 runtime-shim (with a
	// child 13), 14 a child of podsyncd; 20 something else.
	pt := processTable{
		parent: map[int]int{10: 1, 11: 10, 12: 10, 13: 12, 14: 11, 20: 1},
		comm:   map[int]string{10: "microlet", 11: "podsyncd", 12: "runtime-shim", 13: "x", 14: "mount", 20: "other"},
	}
	agent, rt := byRoots(10, 0)(pt)
	if !sameSet(agent, []int{10, 11, 14}) || !sameSet(rt, []int{12, 13}) {
		t.Errorf("microlet groups = %v, %v, want [10 11 14], [12 13]", agent, rt)
	}
	// The kubelet (11 here) and its runtime-shim (12) started apart.
	agent, rt = byRoots(11, 12)(pt)
	if !sameSet(agent, []int{11, 14}) || !sameSet(rt, []int{12, 13}) {
		t.Errorf("kubelet groups = %v, %v, want [11 14], [12 13]", agent, rt)
	}
	if agent, _ := byRoots(99, 0)(pt); len(agent) != 0 {
		t.Errorf("a process that is gone has processes %v", agent)
	}
}

func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range b {
		if !contains(a, x) {
			return false
		}
	}
	return true
}

func TestPerPod(t *testing.T) {
	// 30/min over 90 s is 45 requests; over 15 pods, 3 each.
	got := PerPod(map[string]float64{"POST pods": 30, "GET nodes": 2}, 90, 15)
	if len(got) != 2 || math.Abs(got["POST pods"]-3) > 1e-9 || math.Abs(got["GET nodes"]-0.2) > 1e-9 {
		t.Errorf("PerPod = %v, want POST pods 3, GET nodes 0.2", got)
	}
	if got := PerPod(map[string]float64{"POST pods": 30}, 90, 0); len(got) != 0 {
		t.Errorf("PerPod of no pods = %v, want empty", got)
	}
}

func TestElapsedAndRejected(t *testing.T) {
	t0 := time.Unix(100, 0)
	created := map[string]time.Time{"a": t0, "b": t0.Add(time.Second), "c": t0.Add(2 * time.Second)}
	running := map[string]time.Time{"a": t0.Add(3 * time.Second), "b": t0.Add(2 * time.Second), "x": t0}
	ended := map[string]time.Time{"b": t0.Add(9 * time.Second), "c": t0.Add(4 * time.Second)}
	got := Percentiles(Elapsed(created, running))
	if got.N != 2 || got.P50 != 1 || got.Max != 3 {
		t.Errorf("Elapsed(created, running) = %+v, want the 1 s and 3 s of the two pods that ran", got)
	}
	// c ended without running; b ran, then ended; x was never created.
	if n := rejected(created, running, ended); n != 1 {
		t.Errorf("rejected = %d, want 1", n)
	}
}
