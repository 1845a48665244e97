package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type onePod struct{}

func (onePod) Get(context.Context, string, string) (*corev1.Pod, error) { return nil, nil }
func (onePod) List(context.Context) ([]*corev1.Pod, error) {
	return []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}}, nil
}

func text(s string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, s) })
}

// TestReadOnlyRoutes: the read-only handler serves what the kubelet's
// read-only port serves, without the authentication filter, refuses the
// debugging paths with the kubelet's 405 even when debugging is on, and has
// no /configz; the secure handler keeps everything behind the filter.
// Both count their requests under their own server_type.
func TestReadOnlyRoutes(t *testing.T) {
	reg := prometheus.NewRegistry()
	denyAll := func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "Unauthorized", http.StatusUnauthorized) })
	}
	d := Deps{
		Pods: onePod{}, Summary: text("summary"), Metrics: text("metrics"), ResourceMetrics: text("resource"),
		ProbeMetrics: text("probes"), CadvisorMetrics: text("cadvisor"), Configz: func() any { return "cfg" }, Auth: denyAll,
		DebuggingHandlers: true, Registerer: reg,
	}
	ro, rw := NewReadOnly(d), New(d)
	get := func(h http.Handler, method, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec.Code, rec.Body.String()
	}
	for _, tc := range []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/healthz/ping", 200, "ok"},
		{"GET", "/pods", 200, `"name":"p"`},
		{"GET", "/stats/summary", 200, "summary"},
		{"GET", "/metrics", 200, "metrics"},
		{"GET", "/metrics/resource", 200, "resource"},
		{"GET", "/metrics/probes", 200, "probes"},
		{"POST", "/exec/ns/p/c?command=id", 405, "Debug endpoints are disabled."},
		{"GET", "/attach/ns/p/c", 405, "Debug endpoints are disabled."},
		{"POST", "/portForward/ns/p", 405, "Debug endpoints are disabled."},
		{"POST", "/run/ns/p/c?cmd=id", 405, "Debug endpoints are disabled."},
		{"GET", "/containerLogs/ns/p/c", 405, "Debug endpoints are disabled."},
		{"GET", "/runningpods/", 405, "Debug endpoints are disabled."},
		{"GET", "/debug/pprof/heap", 405, "Debug endpoints are disabled."},
		{"GET", "/logs/syslog", 405, "Debug endpoints are disabled."},
		{"GET", "/configz", 404, ""},
		{"GET", "/metrics/cadvisor", 200, "cadvisor"},
	} {
		code, body := get(ro, tc.method, tc.path)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("read-only %s %s: %d %q, want %d with %q", tc.method, tc.path, code, body, tc.code, tc.body)
		}
		if code, _ := get(rw, tc.method, tc.path); code != http.StatusUnauthorized {
			t.Errorf("secure %s %s: %d, want 401 from the filter", tc.method, tc.path, code)
		}
	}
	for _, st := range []string{"readonly", "readwrite"} {
		if n := requestsTotal(t, reg, "GET", "healthz", st); n != 2 {
			t.Errorf("microlet_nodeapi_http_requests_total{path=healthz,server_type=%s} = %v, want 2", st, n)
		}
	}
}

// requestsTotal is the value of one series of the request counter in reg.
func requestsTotal(t *testing.T, reg *prometheus.Registry, method, path, serverType string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "microlet_nodeapi_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["method"] == method && labels["path"] == path && labels["server_type"] == serverType {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no microlet_nodeapi_http_requests_total{method=%s,path=%s,server_type=%s}", method, path, serverType)
	return 0
}
