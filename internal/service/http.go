package service

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServeHTTP serves h on addr (host:port) in the background until the
// returned server is shut down: the one HTTP listener behind every service's
// --metrics-addr, nodestatussim's --pprof-addr and the supervisor's metrics.
// key is the setting that named addr, for the error when it cannot listen.
func ServeHTTP(key, addr string, h http.Handler, log *slog.Logger) (*http.Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", key, addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server failed", "setting", key, "err", err)
		}
	}()
	log.Info("serving HTTP", "setting", key, "addr", lis.Addr().String())
	return srv, nil
}

// MetricsHandler serves reg and extra in the Prometheus format.
func MetricsHandler(reg *prometheus.Registry, extra ...prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(append(prometheus.Gatherers{reg}, extra...), promhttp.HandlerOpts{Registry: reg})
}

// HandlePprof adds net/http/pprof's endpoints under /debug/pprof/ to mux.
func HandlePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
