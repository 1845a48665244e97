package stats

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

func TestSummaryHandler(t *testing.T) {
	w := newPodWorld(t)
	srv := httptest.NewServer(SummaryHandler(w.p))
	defer srv.Close()

	// answer is a response read whole.
	type answer struct {
		StatusCode int
		Header     http.Header
	}
	get := func(t *testing.T, req *http.Request) (answer, []byte) {
		t.Helper()
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{resp.StatusCode, resp.Header}, b
	}
	summary := func(t *testing.T, req *http.Request) statsv1alpha1.Summary {
		t.Helper()
		resp, b := get(t, req)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s: %d %s: %s", req.Method, req.URL, resp.StatusCode, resp.Header.Get("Content-Type"), b)
		}
		if !strings.HasPrefix(string(b), "{\n \"node\": {\n  \"nodeName\": \"node-a\"") {
			t.Errorf("not indented as the kubelet's: %.60q", b)
		}
		var s statsv1alpha1.Summary
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	full := func(s statsv1alpha1.Summary) bool { return s.Node.Fs != nil }

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/stats/summary", nil)
	s := summary(t, req)
	if !full(s) || len(s.Pods) != 2 || s.Pods[0].EphemeralStorage == nil {
		t.Errorf("GET: %+v", s)
	}
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/stats/summary?only_cpu_and_memory=true", nil)
	if s := summary(t, req); full(s) || s.Node.CPU == nil || len(s.Pods) != 2 {
		t.Errorf("GET only: %+v", s.Node)
	}
	// The kubelet reads the parameter from the form too, and only one
	// value of exactly "true" counts.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+"/stats/summary", strings.NewReader(url.Values{"only_cpu_and_memory": {"true"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if s := summary(t, req); full(s) {
		t.Errorf("POST form only: full summary")
	}
	for _, q := range []string{"only_cpu_and_memory=true&only_cpu_and_memory=true", "only_cpu_and_memory=1", "only_cpu_and_memory=TRUE"} {
		req, _ = http.NewRequest(http.MethodGet, srv.URL+"/stats/summary?"+q, nil)
		if s := summary(t, req); !full(s) {
			t.Errorf("%s: not the full summary", q)
		}
	}

	req, _ = http.NewRequest(http.MethodPut, srv.URL+"/stats/summary", nil)
	if resp, _ := get(t, req); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, POST" {
		t.Errorf("PUT: %d allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}

	w.rt.setErr("ListPodSandbox", status.Error(codes.Unavailable, "runtime down"))
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/stats/summary", nil)
	resp, b := get(t, req)
	if resp.StatusCode != http.StatusInternalServerError || !strings.HasPrefix(string(b), "Internal Error: failed to list pod stats: ") ||
		!strings.Contains(string(b), "runtime down") {
		t.Errorf("runtime down: %d %q", resp.StatusCode, b)
	}
}

// scrapeMetrics scrapes h once: the status, the content type, the body.
func scrapeMetrics(t *testing.T, h http.Handler) (int, string, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics/resource")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestResourceMetricsHandler(t *testing.T) {
	w := newPodWorld(t)
	// Swap stats for the sidecar, to see the limit computed.
	w.rt.sbStats[0].Linux.Containers[2].Swap = &runtimeapi.SwapUsage{Timestamp: t0.UnixNano(), SwapUsageBytes: u64(1000), SwapAvailableBytes: u64(9000)}
	h := ResourceMetricsHandler(w.p)
	code, ctype, text := scrapeMetrics(t, h)
	if code != http.StatusOK || !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("%d %s", code, ctype)
	}
	mf := parseMetrics(t, strings.NewReader(text))
	ms := t0.UnixMilli()
	web := map[string]string{"pod": "web", "namespace": "default"}
	app := map[string]string{"container": "app", "pod": "web", "namespace": "default"}
	side := map[string]string{"container": "sidecar", "pod": "web", "namespace": "default"}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		value  float64
		stamp  int64 // 0: no timestamp
	}{
		{"node_cpu_usage_seconds_total", nil, 5, ms},
		{"node_memory_working_set_bytes", nil, float64(fixtureMemTotal - fixtureMemFree - fixtureInactive), ms},
		{"node_swap_usage_bytes", nil, fixtureSwapUsed, ms},
		{"container_cpu_usage_seconds_total", app, 1.5, ms},
		{"container_cpu_usage_seconds_total", side, 0.5, ms},
		{"container_memory_working_set_bytes", app, 200 << 20, ms},
		{"container_swap_usage_bytes", app, 0, ms},
		{"container_swap_limit_bytes", app, 0, ms},
		{"container_swap_usage_bytes", side, 1000, ms},
		{"container_swap_limit_bytes", side, 10000, ms},
		{"container_start_time_seconds", app, float64(t0.Add(-time.Hour + 2*time.Minute).Unix()), 0},
		{"pod_cpu_usage_seconds_total", web, 2, ms},
		{"pod_memory_working_set_bytes", web, 300 << 20, ms},
		{"pod_swap_usage_bytes", web, 1000, ms},
		{"resource_scrape_error", nil, 0, 0},
	} {
		m := sample(mf, tc.name, tc.labels)
		if m == nil {
			t.Errorf("%s%v missing", tc.name, tc.labels)
			continue
		}
		if v := metricValue(m); v != tc.value {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, v, tc.value)
		}
		if m.GetTimestampMs() != tc.stamp {
			t.Errorf("%s%v timestamp %d, want %d", tc.name, tc.labels, m.GetTimestampMs(), tc.stamp)
		}
	}
	// Types, stability levels in the help texts, and no other families.
	types := map[string]string{
		"node_cpu_usage_seconds_total": "COUNTER", "container_cpu_usage_seconds_total": "COUNTER", "pod_cpu_usage_seconds_total": "COUNTER",
		"node_memory_working_set_bytes": "GAUGE", "node_swap_usage_bytes": "GAUGE", "container_memory_working_set_bytes": "GAUGE",
		"container_swap_usage_bytes": "GAUGE", "container_swap_limit_bytes": "GAUGE", "container_start_time_seconds": "GAUGE",
		"pod_memory_working_set_bytes": "GAUGE", "pod_swap_usage_bytes": "GAUGE", "resource_scrape_error": "GAUGE",
	}
	for name, f := range mf {
		want, ok := types[name]
		if !ok {
			t.Errorf("unexpected family %s", name)
			continue
		}
		if f.GetType().String() != want {
			t.Errorf("%s type %s, want %s", name, f.GetType(), want)
		}
		level := "[STABLE] "
		if strings.Contains(name, "swap") {
			level = "[ALPHA] "
		}
		if !strings.HasPrefix(f.GetHelp(), level) {
			t.Errorf("%s help %q, want the %s level", name, f.GetHelp(), level)
		}
	}
	if len(mf) != len(types) {
		t.Errorf("%d families, want %d", len(mf), len(types))
	}
	// Containers of the batch pod: none running, so no container series.
	if m := sample(mf, "container_cpu_usage_seconds_total", map[string]string{"container": "work", "pod": "batch", "namespace": "jobs"}); m != nil {
		t.Errorf("exited container reported")
	}

	// A failed summary is resource_scrape_error 1 and nothing else.
	w.rt.setErr("ListContainers", status.Error(codes.Unavailable, "runtime down"))
	code, _, text = scrapeMetrics(t, h)
	if code != http.StatusOK {
		t.Fatalf("%d", code)
	}
	mf = parseMetrics(t, strings.NewReader(text))
	if m := sample(mf, "resource_scrape_error", nil); m == nil || metricValue(m) != 1 || len(mf) != 1 {
		t.Errorf("failed scrape:\n%s", text)
	}
}

// TestResourceMetricsBadLabel: a container name that is not UTF-8 costs
// that container's series, not the scrape.
func TestResourceMetricsBadLabel(t *testing.T) {
	w := newPodWorld(t)
	w.rt.sbStats[0].Linux.Containers[2].Attributes.Metadata.Name = "side\xff"
	_, _, text := scrapeMetrics(t, ResourceMetricsHandler(w.p))
	mf := parseMetrics(t, strings.NewReader(text))
	if m := sample(mf, "resource_scrape_error", nil); m == nil || metricValue(m) != 0 {
		t.Fatalf("scrape error:\n%s", text)
	}
	if sample(mf, "container_cpu_usage_seconds_total", map[string]string{"container": "app", "pod": "web", "namespace": "default"}) == nil {
		t.Errorf("good container dropped:\n%s", text)
	}
	if n := len(mf["container_cpu_usage_seconds_total"].GetMetric()); n != 1 {
		t.Errorf("%d container cpu series, want 1", n)
	}
}

// TestResourceMetricsRequestContext: a scrape whose request is gone
// stops asking the runtime.
func TestResourceMetricsRequestContext(t *testing.T) {
	w := newPodWorld(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := resourceCollector{p: w.p, ctx: ctx}
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	if n != 1 {
		t.Errorf("%d metrics from a cancelled scrape, want resource_scrape_error only", n)
	}
}
