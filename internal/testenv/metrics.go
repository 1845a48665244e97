package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is one scrape of a Prometheus text exposition, by family name.
// Tests count with it where a thing would show ("no PATCH happened", "the
// provider was asked three more times") instead of sleeping and hoping.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics parses a Prometheus text exposition.
func ParseMetrics(body []byte) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return mfs, nil
}

// GatherMetrics is Metrics of what g gathers now.
func GatherMetrics(g prometheus.Gatherer) (Metrics, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := Metrics{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out, nil
}

// ScrapeMetrics GETs url (a /metrics endpoint) and parses it.
func ScrapeMetrics(ctx context.Context, url string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return ParseMetrics(body)
}

// Sum adds up the counter, gauge or untyped values of family name over the
// series whose labels include every pair of match.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	var n float64
	for _, s := range m.matching(name, match) {
		switch {
		case s.Counter != nil:
			n += s.GetCounter().GetValue()
		case s.Gauge != nil:
			n += s.GetGauge().GetValue()
		case s.Untyped != nil:
			n += s.GetUntyped().GetValue()
		}
	}
	return n
}

// Count adds up the sample counts of histogram name over the series whose
// labels include every pair of match.
func (m Metrics) Count(name string, match map[string]string) uint64 {
	var n uint64
	for _, s := range m.matching(name, match) {
		n += s.GetHistogram().GetSampleCount()
	}
	return n
}

func (m Metrics) matching(name string, match map[string]string) []*dto.Metric {
	var out []*dto.Metric
series:
	for _, s := range m[name].GetMetric() {
		have := map[string]string{}
		for _, lp := range s.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range match {
			if have[k] != v {
				continue series
			}
		}
		out = append(out, s)
	}
	return out
}

// criServicePrefix starts the names of the CRI's gRPC services
// (runtime.v1.RuntimeService, runtime.v1.ImageService).
const criServicePrefix = "runtime.v1."

// CRICalls is how many CRI calls a runtime-shim scrape shows as handled, by
// method ("ListContainers", "PullImage"): grpc_server_handled_total
// (go-grpc-middleware's server metrics) summed over response codes, for the
// runtime.v1 services only, so health checks and the runtime's own
// services are left out. The two CRI services share no method name.
func (m Metrics) CRICalls() map[string]float64 {
	out := map[string]float64{}
	for _, series := range m["grpc_server_handled_total"].GetMetric() {
		var svc, method string
		for _, l := range series.GetLabel() {
			switch l.GetName() {
			case "grpc_service":
				svc = l.GetValue()
			case "grpc_method":
				method = l.GetValue()
			}
		}
		if strings.HasPrefix(svc, criServicePrefix) {
			out[method] += series.GetCounter().GetValue()
		}
	}
	return out
}

// ScrapeCRICalls is CRICalls of the runtime-shim serving its metrics on
// addr (host:port, its --metrics-addr).
func ScrapeCRICalls(ctx context.Context, addr string) (map[string]float64, error) {
	m, err := ScrapeMetrics(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return nil, fmt.Errorf("runtime-shim metrics on %s: %w", addr, err)
	}
	return m.CRICalls(), nil
}

// LoggedHTTPAddr finds the address a service logged when it started serving
// HTTP for setting (internal/service.ServeHTTP's "serving HTTP" line, in
// either log format), so a test can pass "127.0.0.1:0" and still scrape.
func LoggedHTTPAddr(log, setting string) (string, error) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "serving HTTP") || !strings.Contains(line, setting) {
			continue
		}
		for _, sep := range []string{"addr=", `"addr":"`} {
			if _, rest, ok := strings.Cut(line, sep); ok {
				return strings.FieldsFunc(rest, func(r rune) bool { return r == ' ' || r == '"' })[0], nil
			}
		}
	}
	return "", errors.New("no \"serving HTTP\" line for " + setting + " logged yet")
}
