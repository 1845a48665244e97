package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// klog (client-go's informers, event broadcasters) logs through the
// service's handler, in its format and with its attributes.
func TestKlogFollowsLogFormat(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	c := DefaultCommon()
	c.LogFormat = "json"
	if _, err := setupLogging(&c, "podconfig", f); err != nil {
		t.Fatal(err)
	}
	klog.InfoS("informer started", "resource", "pods")
	klog.ErrorS(errors.New("watch failed"), "reflector", "resource", "nodes")
	klog.Flush()
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines, want 2:\n%s", len(lines), b)
	}
	for i, want := range []struct{ msg, level, resource string }{{"informer started", "INFO", "pods"}, {"reflector", "ERROR", "nodes"}} {
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &rec); err != nil {
			t.Fatalf("line %d is not JSON (%v): %s", i, err, lines[i])
		}
		if rec["msg"] != want.msg || rec["level"] != want.level || rec["resource"] != want.resource || rec["service"] != "podconfig" {
			t.Fatalf("line %d = %v, want msg %q level %s resource %s service podconfig", i, rec, want.msg, want.level, want.resource)
		}
	}
}

// The metrics server serves /metrics, and pprof only with --debug.
func TestDebugMux(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "probe_total", Help: "h"}))
	c := DefaultCommon()
	for _, debug := range []bool{false, true} {
		c.Debug = debug
		mux := debugMux(&c, reg, nil)
		get := func(path string) (int, string) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			b, _ := io.ReadAll(rec.Result().Body)
			return rec.Code, string(b)
		}
		if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "probe_total 0") {
			t.Fatalf("debug=%v: /metrics %d %q", debug, code, body)
		}
		want := http.StatusNotFound
		if debug {
			want = http.StatusOK
		}
		if code, _ := get("/debug/pprof/cmdline"); code != want {
			t.Fatalf("debug=%v: /debug/pprof/cmdline %d, want %d", debug, code, want)
		}
	}
}

// Setting up logging again (several services in one test process) while
// libraries log through klog is race-free, and klog follows the newest
// service's handler.
func TestKlogSwitchWhileLogging(t *testing.T) {
	dir := t.TempDir()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				klog.Background().WithValues("k", "v").Info("informer tick")
			}
		}
	}()
	var last *os.File
	for i := 0; i < 20; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("log%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }()
		c := DefaultCommon()
		c.LogFormat = "json"
		if _, err := setupLogging(&c, fmt.Sprintf("svc%d", i), f); err != nil {
			t.Fatal(err)
		}
		last = f
	}
	close(stop)
	<-done
	klog.Background().WithValues("k", "last").Info("after switch")
	klog.Flush()
	b, err := os.ReadFile(last.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"msg":"after switch"`) || !strings.Contains(string(b), `"service":"svc19"`) || !strings.Contains(string(b), `"k":"last"`) {
		t.Fatalf("the last service's log lacks klog's record with its attributes:\n%s", b)
	}
}
