package benchvs

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sampleRecord() *Record {
	return &Record{
		Started: time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC), Command: "make bench-vs-kubelet",
		Microlet: "abc1234", Kubelet: "Kubernetes v1.36.3",
		Host:          Host{Kernel: "6.1", Docker: "Docker 20.10", Cgroup: "cgroup v1", CPUs: 2},
		Settings:      Settings{Batches: []int{10}, IdleSeconds: 60, SteadyPods: 110, SteadySeconds: 120, ChurnRate: 5, ChurnSeconds: 120, Image: "microlet/busybox:1.0"},
		KubeletNodeIP: "172.30.0.1",
		Baseline:      Window{Seconds: 60, Requests: map[string]float64{"GET (non-resource)": 2, "PUT leases": 6}},
		Agents: []AgentRun{
			{Name: Microlet,
				Batches: []Batch{{Pods: 10, Running: Latency{P50: 1, P90: 2, P99: 3}, Ready: Latency{P50: 1.5, P90: 2.5, P99: 3.5}, PodsPerSecond: 4, Deleted: Latency{P50: 0.5, P90: 1, P99: 1}, Load: Load{Start: 1, End: 1.5}}},
				Idle: Window{AgentCPU: 0.01, AgentPSS: 50 << 20, AgentPSSMax: 60 << 20, AgentProcs: 7, Requests: map[string]float64{"GET (non-resource)": 2, "PUT leases": 12, "PATCH nodes/status": 1},
					CRICalls: map[string]float64{"ListContainers": 60, "Version": 2}},
				Steady: Window{AgentCPU: 0.1, AgentPSS: 80 << 20, Requests: map[string]float64{"PUT leases": 12}, CRICalls: map[string]float64{"ListContainers": 60, "ListPodSandbox": 60}},
				Churn: sampleChurn(0, 0.4, Latency{P50: 2, P90: 4, P99: 8}, map[string]float64{
					"POST pods": 240, "DELETE pods": 480, "PATCH pods/status": 960, "GET pods": 240, "GET (non-resource)": 2, "PUT leases": 6})},
			{Name: Kubelet,
				Batches: []Batch{{Pods: 10, Running: Latency{P50: 2, P90: 4, P99: 6}, Ready: Latency{P50: 2, P90: 4, P99: 7}, PodsPerSecond: 2, Deleted: Latency{P50: 1, P90: 2, P99: 4}, Load: Load{Start: 2, End: 2.5}}},
				Idle: Window{AgentCPU: 0.02, AgentPSS: 100 << 20, AgentPSSMax: 110 << 20, AgentProcs: 1, Requests: map[string]float64{"GET (non-resource)": 2, "PUT leases": 12, "PATCH nodes/status": 3, "GET nodes": 6},
					CRICalls: map[string]float64{"ListContainers": 120, "ImageFsInfo": 6}},
				Steady: Window{AgentCPU: 0.4, AgentPSS: 100 << 20, Requests: map[string]float64{"PUT leases": 12}, CRICalls: map[string]float64{"ListContainers": 240, "ListPodSandbox": 60}},
				Churn: sampleChurn(12, 0.8, Latency{P50: 3, P90: 6, P99: 16}, map[string]float64{
					"POST pods": 240, "DELETE pods": 960, "PATCH pods/status": 1440, "GET pods": 720, "GET (non-resource)": 2, "PUT leases": 6})},
		},
	}
}

// sampleChurn is 600 pods over a 150 s span with the given requests per
// minute.
func sampleChurn(rejected int, cpu float64, running Latency, requests map[string]float64) *Churn {
	w := Window{Seconds: 150, AgentCPU: cpu, AgentPSS: 100 << 20, AgentPSSMax: 120 << 20, RuntimeCPU: 0.5,
		Requests: requests, CRICalls: map[string]float64{"RunPodSandbox": 240 - 4.8*float64(rejected)}, Load: Load{Start: 3, End: 9}}
	return &Churn{Pods: 600, Rate: 5, Rejected: rejected, Running: running, Deleted: Latency{P50: 1, P99: 3}, Window: w,
		RequestsPerPod: PerPod(requests, w.Seconds, 600)}
}

// requireLines fails t for each of wants the page does not hold.
func requireLines(t *testing.T, page string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		a, b float64
		want string
	}{{1, 2, "0.50×"}, {3, 1, "3.00×"}, {0, 2, "0.00×"}, {1, 0, "–"}, {-1, 2, "–"}, {missing, 2, "–"}, {1, missing, "–"}} {
		if got := Ratio(tc.a, tc.b); got != tc.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestNet(t *testing.T) {
	base := Window{Requests: map[string]float64{"PUT leases": 6, "GET (non-resource)": 2.02}}
	for _, tc := range []struct {
		name        string
		requests    map[string]float64
		all, writes float64
	}{
		{"above the baseline", map[string]float64{"PUT leases": 12, "GET nodes": 3, "GET (non-resource)": 2}, 8.98, 6},
		// A window a little shorter than the baseline's: not negative.
		{"below the baseline", map[string]float64{"PUT leases": 5.99, "GET (non-resource)": 2}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := Window{Requests: tc.requests}
			if got := net(x, base, false); math.Abs(got-math.Round(tc.all*10)/10) > 1e-9 {
				t.Errorf("all = %v, want %v", got, math.Round(tc.all*10)/10)
			}
			if got := net(x, base, true); got != tc.writes {
				t.Errorf("writes = %v, want %v", got, tc.writes)
			}
		})
	}
}

func TestWritePage(t *testing.T) {
	var b strings.Builder
	WritePage(&b, sampleRecord(), "test/benchvs/runs/20261201-103000.json")
	page := b.String()
	requireLines(t, page,
		"from test/benchvs/runs/20261201-103000.json; do not edit",
		"| batch | microlet | kubelet | microlet/kubelet |",
		"| 10 pods: created → Running p50 | 1.00 s | 2.00 s | 0.50× |",
		"| 10 pods: created → Ready p99 | 3.50 s | 7.00 s | 0.50× |",
		"| 10 pods: pods/s to Running | 4.00 | 2.00 | 2.00× |",
		"| 10 pods: deleted → gone p99 | 1.00 s | 4.00 s | 0.25× |",
		"| 10 pods: load average (1 min), start → end | 1.00 → 1.50 | 2.00 → 2.50 | |",
		"### Idle node, no pods (60 s)",
		"| agent CPU (cores) | 0.010 | 0.020 | 0.50× |",
		"| agent processes | 7 | 1 | |",
		"| agent memory (PSS, all its processes, mean) | 50.0 MiB | 100.0 MiB | 0.50× |",
		// Less the baseline's 8/min, of which 6 are writes.
		"| API requests/min (all, less the baseline's) | 7.0 | 15.0 | 0.47× |",
		"| API writes/min (less the baseline's) | 7.0 | 9.0 | 0.78× |",
		"### Steady state, 110 pods Running (120 s)",
		"| agent CPU (cores) | 0.100 | 0.400 | 0.25× |",
		"| request | baseline | microlet idle | microlet steady | kubelet idle | kubelet steady |",
		"| GET nodes | 0.0 | 0.0 | 0.0 | 6.0 | 0.0 |",
		"| PATCH nodes/status | 0.0 | 1.0 | 0.0 | 3.0 | 0.0 |",
		"| kubelet node IP | 172.30.0.1 |",
		"steady state 110 pods; churn 5 pods/s for 120 s |",
		// Churn: 600 pods in 150 s.
		"### Churn, 5 pods/s created for 120 s, each deleted once Running",
		"| pods created | 600 | 600 | |",
		"| pods rejected (ended without running) | 0 | 12 | |",
		"| created → Running p99 | 8.00 s | 16.00 s | 0.50× |",
		"| agent CPU (cores, over that span) | 0.400 | 0.800 | 0.50× |",
		"| agent CPU seconds per pod | 0.100 | 0.200 | 0.50× |",
		"| runtime-shim CPU seconds per pod | 0.125 | 0.125 | 1.00× |",
		// (1928 - 8)/min over 2.5 min, 600 pods; the kubelet (3368 - 8).
		"| API requests per pod (all, less the baseline's) | 8.00 | 14.00 | 0.57× |",
		"| API writes per pod (less the baseline's) | 7.00 | 11.00 | 0.64× |",
		"| load average (1 min), start → end | 3.00 → 9.00 | 3.00 → 9.00 | |",
		"| request | microlet | kubelet | microlet/kubelet |",
		"| DELETE pods | 2.00 | 4.00 | 0.50× |",
		// CRI calls per minute, a table per window.
		"### CRI calls per minute, by method",
		"| method | microlet | kubelet | microlet/kubelet |",
		"| ListContainers | 60.0 | 120.0 | 0.50× |",
		"| ImageFsInfo | 0.0 | 6.0 | 0.00× |",
		"| Version | 2.0 | 0.0 | – |",
		"| total | 62.0 | 126.0 | 0.49× |",
		"| ListContainers | 60.0 | 240.0 | 0.25× |",
		"| total | 120.0 | 300.0 | 0.40× |",
		"| RunPodSandbox | 240.0 | 182.4 | 1.32× |",
	)
	// Request keys sorted.
	perMinute := page[strings.Index(page, "### API requests per minute"):]
	if i, j := strings.Index(perMinute, "| GET nodes |"), strings.Index(perMinute, "| PUT leases |"); i < 0 || j < 0 || i > j {
		t.Errorf("request rows not sorted:\n%s", page)
	}
}

// A record made before the CRI calls and the churn were measured still
// renders: what it lacks shows as "–".
func TestWritePageOldRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "20261129-051845.json")
	old := `{"started": "2026-11-29T05:18:45Z", "command": "make bench-vs-kubelet", "microlet": "7d85974",
	  "settings": {"batches": [10], "idleSeconds": 60, "steadyPods": 110, "steadySeconds": 120},
	  "baseline": {"seconds": 60, "requests": {"PUT leases": 6}},
	  "agents": [
	    {"name": "microlet", "idle": {"seconds": 60, "agentCPU": 0.01, "requests": {"PUT leases": 12}}, "steady": {"seconds": 120}},
	    {"name": "kubelet", "idle": {"seconds": 60, "agentCPU": 0.02, "requests": {"PUT leases": 12}}, "steady": {"seconds": 120}}]}`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WritePage(&b, r, path)
	page := b.String()
	requireLines(t, page,
		"| agent CPU (cores) | 0.010 | 0.020 | 0.50× |",
		"steady state 110 pods |",
		"### Churn (not in this run)",
		"| pods created | – | – | |",
		"| created → Running p99 | – | – | – |",
		"| API requests per pod (all, less the baseline's) | – | – | – |",
		"| load average (1 min), start → end | – | – | |",
		"#### Churn (not in this run)",
		"| method | microlet | kubelet | microlet/kubelet |\n|---|---:|---:|---:|\n| total | – | – | – |\n",
	)
	if strings.Contains(page, "NaN") {
		t.Errorf("page shows NaN:\n%s", page)
	}
}

func TestWriteTablesOneAgent(t *testing.T) {
	r := sampleRecord()
	r.Agents = r.Agents[:1]
	var b strings.Builder
	WriteTables(&b, r)
	if s := b.String(); strings.Contains(s, "×") || !strings.Contains(s, "| batch | microlet |\n") {
		t.Errorf("one agent: want no ratio column:\n%s", s)
	}
}

func TestSaveNewestRead(t *testing.T) {
	dir := t.TempDir()
	if _, err := Newest(dir); err == nil {
		t.Error("Newest of an empty directory: no error")
	}
	older, newer := sampleRecord(), sampleRecord()
	newer.Started = older.Started.Add(25 * time.Hour)
	newer.Microlet = "def5678"
	for _, r := range []*Record{newer, older} {
		if _, err := Save(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	path, err := Newest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "20261202-113000.json" {
		t.Errorf("Newest = %s, want 20261202-113000.json", path)
	}
	got, err := ReadRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Microlet != "def5678" || got.Agents[1].Batches[0].Running.P99 != 6 || got.Baseline.Requests["PUT leases"] != 6 ||
		got.Agents[1].Churn.Rejected != 12 || got.Agents[0].Steady.CRICalls["ListPodSandbox"] != 60 || got.Baseline.CRICalls != nil {
		t.Errorf("ReadRecord did not return what Save wrote: %+v", got)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"agents":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecord(bad); err == nil {
		t.Error("ReadRecord accepted a record without agents")
	}
}
