package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// writeVerbs are the apiserver_request_total verbs that write.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "DELETE": true, "DELETECOLLECTION": true, "APPLY": true}

// scrape reads apiserver_request_total and sums the write verbs by
// resource[/subresource] and verb.
func scrape(ctx context.Context, admin kubernetes.Interface) (map[string]float64, error) {
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("apiserver /metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := map[string]float64{}
	for _, m := range mfs["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		if !writeVerbs[l["verb"]] {
			continue
		}
		res := l["resource"]
		if l["subresource"] != "" {
			res += "/" + l["subresource"]
		}
		out[res+" "+l["verb"]] += m.GetCounter().GetValue()
	}
	return out, nil
}

// profile saves 30 s CPU profiles, taken 30 s into the window, of
// kube-apiserver and, when agentPprof is set, of the agent.
func (e *benchEnv) profile(ctx context.Context, name, agentPprof string) {
	if sleep(ctx, 30*time.Second) != nil {
		return
	}
	if agentPprof != "" {
		go saveURL(ctx, agentPprof+"profile?seconds=30", filepath.Join(e.opts.profileDir, name+".pprof"))
	}
	body, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "30").DoRaw(ctx)
	if err != nil {
		logf("profile %s: %v", name, err)
		return
	}
	path := filepath.Join(e.opts.profileDir, "kube-apiserver-"+name+".pprof")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		logf("profile %s: %v", name, err)
		return
	}
	logf("saved %s", path)
}

// saveURL saves what url returns to path (pprof of the agent).
func saveURL(ctx context.Context, url, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		logf("%s: %v", url, err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		logf("%s: %v", url, err)
		return
	}
	logf("saved %s", path)
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
