package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/healthz"
	criapi "k8s.io/cri-api/pkg/apis"

	"github.com/microlet/microlet/services/nodeapi/internal/pods"
	"github.com/microlet/microlet/services/nodeapi/internal/runtimepods"
	"github.com/microlet/microlet/services/nodeapi/internal/streams"
)

// Deps are what the routes serve from. Nil handlers leave their paths
// answering 404, as a kubelet without that feature would.
type Deps struct {
	// Pods lists and finds the node's pods (spec and status).
	Pods interface {
		pods.Getter
		pods.Lister
	}
	// Runtime is the CRI runtime service.
	Runtime criapi.RuntimeService
	// Streams serves exec, attach, port-forward and run.
	Streams *streams.Handlers
	// ContainerLogs serves /containerLogs/{namespace}/{pod}/{container}.
	ContainerLogs http.Handler
	// Summary serves /stats/summary; ResourceMetrics /metrics/resource;
	// CadvisorMetrics /metrics/cadvisor.
	Summary, ResourceMetrics, CadvisorMetrics http.Handler
	// Metrics serves /metrics (the service's own registry and podsyncd's
	// kubelet metrics); ProbeMetrics /metrics/probes (the prober's).
	Metrics, ProbeMetrics http.Handler
	// Checks are health checks added to ping and log under /healthz.
	Checks []healthz.HealthChecker
	// Configz returns the object /configz serves under "kubeletconfig".
	Configz func() any
	// Auth wraps every route (authentication and authorization); nil
	// serves without it (tests only).
	Auth func(http.Handler) http.Handler
	// DebuggingHandlers enables exec, attach, port-forward, run,
	// containerLogs, runningpods and configz, as the kubelet's
	// enableDebuggingHandlers (on by default); off, they answer 405.
	DebuggingHandlers bool
	// Registerer receives the request metrics; nil skips them.
	Registerer prometheus.Registerer
	// Log is the logger.
	Log *slog.Logger
}

// New returns the handler of the whole API: every route behind d.Auth,
// counted as server type "readwrite".
func New(d Deps) http.Handler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	mux := http.NewServeMux()
	installReadOnly(mux, d)
	if d.DebuggingHandlers {
		installDebugging(mux, d)
	} else {
		// As the kubelet, which also leaves /configz out when debugging is off.
		installDisabled(mux, "/configz")
	}
	var h http.Handler = mux
	if d.Auth != nil {
		h = d.Auth(h)
	}
	if d.Registerer != nil {
		h = instrument(h, d.Registerer, "readwrite")
	}
	return h
}

// NewReadOnly returns the handler of the kubelet's read-only port
// (readOnlyPort): what the kubelet installs there, without authentication
// or authorization. It serves /healthz, /pods, /stats/summary and the
// metrics paths (/metrics, /metrics/resource, /metrics/probes,
// /metrics/cadvisor); exec, attach, port-forward, run, containerLogs,
// runningpods, pprof and the node logs answer 405 "Debug endpoints are
// disabled." whatever d.DebuggingHandlers says, and /configz is not there
// (404). d.Auth is ignored. Requests are counted as server type
// "readonly".
func NewReadOnly(d Deps) http.Handler {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	mux := http.NewServeMux()
	installReadOnly(mux, d)
	installDisabled(mux)
	var h http.Handler = mux
	if d.Registerer != nil {
		h = instrument(h, d.Registerer, "readonly")
	}
	return h
}

// installReadOnly installs the routes the kubelet serves on both ports
// (its InstallAuthNotRequiredHandlers): health, pods, stats and metrics.
func installReadOnly(mux *http.ServeMux, d Deps) {
	checks := append([]healthz.HealthChecker{healthz.PingHealthz, healthz.LogHealthz}, d.Checks...)
	healthz.InstallHandler(mux, checks...)

	if d.Pods != nil {
		podsHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			list, err := d.Pods.List(r.Context())
			if err != nil {
				d.Log.Error("list pods", "err", err)
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			writePodList(w, d.Log, derefPods(list))
		})
		mux.Handle("GET /pods", podsHandler)
		mux.Handle("GET /pods/", podsHandler)
	}

	for path, h := range map[string]http.Handler{
		"/stats/summary": d.Summary, "/metrics": d.Metrics, "/metrics/resource": d.ResourceMetrics,
		"/metrics/probes": d.ProbeMetrics, "/metrics/cadvisor": d.CadvisorMetrics,
	} {
		if h != nil {
			mux.Handle(path, h)
		}
	}
}

// debuggingPaths are the kubelet's debugging handlers' paths, which answer
// 405 where debugging is disabled.
var debuggingPaths = []string{"/run/", "/exec/", "/attach/", "/portForward/", "/containerLogs/", "/runningpods/", "/debug/pprof/", "/logs/"}

// installDisabled makes the debugging paths, and extra, answer 405 "Debug
// endpoints are disabled.", the kubelet's InstallDebuggingDisabledHandlers.
func installDisabled(mux *http.ServeMux, extra ...string) {
	disabled := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Debug endpoints are disabled.", http.StatusMethodNotAllowed)
	})
	for _, p := range append(slices.Clone(debuggingPaths), extra...) {
		mux.Handle(p, disabled)
	}
}

func installDebugging(mux *http.ServeMux, d Deps) {
	if d.Streams != nil {
		for _, m := range []string{"GET", "POST"} {
			for _, p := range []string{"/exec/{namespace}/{pod}/{container}", "/exec/{namespace}/{pod}/{uid}/{container}"} {
				mux.Handle(m+" "+p, d.Streams.Exec())
			}
			for _, p := range []string{"/attach/{namespace}/{pod}/{container}", "/attach/{namespace}/{pod}/{uid}/{container}"} {
				mux.Handle(m+" "+p, d.Streams.Attach())
			}
			for _, p := range []string{"/portForward/{namespace}/{pod}", "/portForward/{namespace}/{pod}/{uid}"} {
				mux.Handle(m+" "+p, d.Streams.PortForward())
			}
		}
		mux.Handle("POST /run/{namespace}/{pod}/{container}", d.Streams.Run())
		mux.Handle("POST /run/{namespace}/{pod}/{uid}/{container}", d.Streams.Run())
	}
	if d.ContainerLogs != nil {
		mux.Handle("GET /containerLogs/{namespace}/{pod}/{container}", d.ContainerLogs)
	}
	if d.Runtime != nil {
		running := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			all, err := runtimepods.List(r.Context(), d.Runtime)
			if err != nil {
				d.Log.Error("list running pods", "err", err)
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			writePodList(w, d.Log, all.APIPods())
		})
		mux.Handle("GET /runningpods/", running)
	}
	if d.Configz != nil {
		mux.Handle("GET /configz", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			b, err := json.Marshal(map[string]any{"kubeletconfig": d.Configz()})
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		}))
	}
}

func derefPods(in []*corev1.Pod) []corev1.Pod {
	out := make([]corev1.Pod, 0, len(in))
	for _, p := range in {
		out = append(out, *p)
	}
	return out
}

func writePodList(w http.ResponseWriter, log *slog.Logger, items []corev1.Pod) {
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Items: items}
	b, err := json.Marshal(&list)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(b); err != nil {
		log.Debug("write pod list", "err", err)
	}
}

// Path buckets the kubelet counts requests under; anything else is "other".
var buckets = map[string]bool{
	"healthz": true, "pods": true, "stats": true, "metrics": true, "metrics/cadvisor": true, "metrics/probes": true,
	"metrics/resource": true, "run": true, "exec": true, "attach": true, "portForward": true, "containerLogs": true,
	"configz": true, "runningpods": true, "logs": true, "debug": true, "pprof": true, "checkpoint": true,
}

var longRunning = map[string]bool{"exec": true, "attach": true, "portForward": true, "debug": true}

func bucket(path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	b := parts[0]
	if b == "metrics" && len(parts) > 1 {
		b = "metrics/" + parts[1]
	}
	if buckets[b] {
		return b
	}
	return "other"
}

func methodBucket(m string) string {
	switch m {
	case "OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT":
		return m
	}
	return "other"
}

// instrument counts requests the way the kubelet's server does
// (kubelet_http_requests_total and friends), under microlet's prefix, with
// serverType ("readwrite" or "readonly") as the server_type label. Both
// servers count in the same families.
func instrument(next http.Handler, reg prometheus.Registerer, serverType string) http.Handler {
	labels := []string{"method", "path", "server_type", "long_running"}
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "microlet_nodeapi_http_requests_total", Help: "Requests to the kubelet API, by method and path bucket.",
	}, labels)
	inflight := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "microlet_nodeapi_http_inflight_requests", Help: "Requests to the kubelet API being served now.",
	}, labels)
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "microlet_nodeapi_http_requests_duration_seconds", Help: "Duration of kubelet API requests.",
		Buckets: prometheus.DefBuckets,
	}, labels)
	total, inflight, duration = registered(reg, total), registered(reg, inflight), registered(reg, duration)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := bucket(r.URL.Path)
		lv := []string{methodBucket(r.Method), p, serverType, strconv.FormatBool(longRunning[p])}
		total.WithLabelValues(lv...).Inc()
		g := inflight.WithLabelValues(lv...)
		g.Inc()
		start := time.Now()
		defer func() {
			g.Dec()
			duration.WithLabelValues(lv...).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(w, r)
	})
}

// registered registers c with reg, or returns the equal collector already
// registered (the other server's).
func registered[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var dup prometheus.AlreadyRegisteredError
	if errors.As(err, &dup) {
		if existing, ok := dup.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("nodeapi request metrics: %v", err))
}
