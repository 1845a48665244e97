package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/grpcserver"
	"github.com/microlet/microlet/internal/memtrim"
	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/systemd"
)

// Service is what a microlet service binary implements.
type Service interface {
	// Name is the component name ("podconfig", ...); it picks the socket.
	Name() string
	// Config returns a pointer to the service's config struct holding its
	// defaults; Main loads the file and flags into it.
	Config() CommonConfig
	// Register validates the loaded config and registers the gRPC services on
	// env.Server. An error here is a usage error (exit code 2).
	Register(env *Env) error
	// Run does the service's work until ctx ends, calling env.Ready once it can
	// answer. Its error ends the process with exit code 1.
	Run(ctx context.Context, env *Env) error
}

// Env is what the skeleton hands a service.
type Env struct {
	// Log is the service's logger.
	Log *slog.Logger
	// Server is the gRPC server; register services in Register.
	Server *grpcserver.Server
	// Registry is the Prometheus registry for the service's own metrics.
	Registry *prometheus.Registry
	// Common is the shared part of the loaded config.
	Common *Common

	readyOnce sync.Once
	onReady   []func()
	gatherers []prometheus.Gatherer
}

// Gather adds g to what --metrics-addr serves beside Registry, for libraries
// that register their metrics elsewhere (k8s.io/component-base's
// legacyregistry). Names must not repeat Registry's. Call it in Register.
func (e *Env) Gather(g prometheus.Gatherer) { e.gatherers = append(e.gatherers, g) }

// Ready marks the service SERVING. Later calls do nothing.
func (e *Env) Ready() {
	e.readyOnce.Do(func() {
		e.Server.SetServing(true)
		e.Log.Info("serving")
		for _, f := range e.onReady {
			f()
		}
	})
}

// OnReady registers f to run when the service becomes ready (the systemd
// notifier uses it). Register before Run.
func (e *Env) OnReady(f func()) { e.onReady = append(e.onReady, f) }

// Main runs svc as a process: it parses os.Args and exits with its status.
func Main(svc Service) {
	os.Exit(Execute(svc, os.Args[1:]))
}

// Execute is Main without the exit, returning the exit status: 0 after a
// clean stop, 1 when Run failed, 2 for a usage or configuration error.
func Execute(svc Service, args []string) int {
	cfg := svc.Config()
	if err := config.Load(svc.Name(), cfg, args); err != nil {
		if errors.Is(err, config.ErrHelp) {
			return 0
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name(), err)
		return 2
	}
	c := cfg.CommonConfig()
	if err := c.Complete(svc.Name()); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name(), err)
		return 2
	}
	log, err := setupLogging(c, svc.Name(), os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name(), err)
		return 2
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	env := &Env{
		Log:      log,
		Server:   grpcserver.New(log, grpcserver.WithRegistry(reg), grpcserver.WithReflection(c.Debug)),
		Registry: reg,
		Common:   c,
	}
	if err := svc.Register(env); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name(), err)
		return 2
	}

	activated := systemd.Activated()
	lis, err := listen(c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name(), err)
		return 2
	}
	// Under systemd: READY=1 once SERVING, watchdog pings that ask the
	// service's own health, STOPPING=1 at shutdown. A no-op otherwise.
	probe := &selfProbe{path: lis.Addr().String()}
	defer probe.close()
	notifier := systemd.NewNotifier(log, probe.check)
	env.OnReady(notifier.Ready)
	ctx, cancel := signals.Context()
	defer cancel()
	// Once serving, give back what only start-up needed (docs/footprint.md).
	env.OnReady(func() { memtrim.AfterStartup(ctx, log) })

	var metricsSrv *http.Server
	if c.MetricsAddr != "" {
		metricsSrv, err = ServeHTTP("metrics_addr", c.MetricsAddr, debugMux(c, reg, env.gatherers), log)
		if err != nil {
			_ = lis.Close()
			fmt.Fprintf(os.Stderr, "%s: %v\n", svc.Name(), err)
			return 2
		}
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- env.Server.Serve(lis) }()
	log.Info("listening", "socket", lis.Addr().String(), "socket_activated", activated)

	runErr := make(chan error, 1)
	runCtx, stopRun := context.WithCancel(ctx)
	go func() { runErr <- svc.Run(runCtx, env) }()

	status := 0
	select {
	case <-ctx.Done():
		log.Info("stopping", "reason", "signal")
	case err := <-serveErr:
		log.Error("gRPC server failed", "err", err)
		status = 1
	case err := <-runErr:
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Error("service failed", "err", err)
			status = 1
		}
		runErr <- nil
	}
	notifier.Stopping()
	stopRun()
	env.Server.Stop(c.ShutdownTimeout)
	select {
	case err := <-runErr:
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Warn("service stopped with an error", "err", err)
		}
	case <-time.After(c.ShutdownTimeout):
		log.Warn("service did not stop in time", "timeout", c.ShutdownTimeout)
	}
	if metricsSrv != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Second)
		_ = metricsSrv.Shutdown(sctx)
		scancel()
	}
	_ = lis.Close()
	log.Info("stopped")
	return status
}

// hostname is the default node name as the kubelet derives it: the host
// name, trimmed and lower-cased, refused when empty. It is here rather than
// k8s.io/component-helpers/node/util.GetHostname because that package links
// client-go's whole clientset (every API group's scheme, initialised at
// start-up) into services that never talk to the API server: runtime-shim.
func hostname(get func() (string, error)) (string, error) {
	h, err := get()
	if err != nil {
		return "", fmt.Errorf("host name: %w", err)
	}
	h = strings.ToLower(strings.TrimSpace(h))
	if h == "" {
		return "", errors.New("host name is empty; set node_name")
	}
	return h, nil
}

// Complete fills derived defaults and checks the shared settings.
func (c *Common) Complete(name string) error {
	if c.NodeName == "" {
		h, err := hostname(os.Hostname)
		if err != nil {
			return fmt.Errorf("node name: %w", err)
		}
		c.NodeName = h
	}
	if c.Socket == "" {
		c.Socket = components.SocketPath(c.RunDir, name)
	}
	if err := socket.CheckPath(c.Socket); err != nil {
		return err
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("shutdown_timeout must be positive, got %s", c.ShutdownTimeout)
	}
	return nil
}

// listen makes the service's listener: the socket systemd passed (socket
// activation, LISTEN_FDS), or a new one. Whichever it is, the allowed peers
// are checked on every connection, and a passed socket must live in a safe
// directory and belong to socket_group when one is set, rather than the
// setting being ignored.
func listen(c *Common) (net.Listener, error) {
	path := c.Socket
	peers, err := socket.ParsePeers(c.SocketAllowedUsers, c.SocketAllowedGroups)
	if err != nil {
		return nil, err
	}
	passed := func(lis net.Listener) (net.Listener, error) {
		at := lis.Addr().String()
		if !filepath.IsAbs(at) {
			at = path
		}
		if err := checkPassed(at, c.SocketGroup); err != nil {
			_ = lis.Close()
			return nil, err
		}
		return socket.CheckPeers(lis, peers), nil
	}
	if lis, err := systemd.Listener(path); err != nil || lis != nil {
		if err != nil {
			return nil, err
		}
		return passed(lis)
	}
	opts := []socket.Option{socket.WithPeers(peers)}
	if c.SocketGroup != "" {
		opts = append(opts, socket.WithGroup(c.SocketGroup))
	}
	return socket.Listen(path, opts...)
}

// checkPassed checks a socket systemd created: its directory as Listen
// would, and its group against socket_group, which the service cannot
// apply itself (the .socket unit's SocketGroup= does).
func checkPassed(path, group string) error {
	if err := socket.CheckDir(filepath.Dir(path)); err != nil {
		return err
	}
	if group == "" {
		return nil
	}
	gid, err := socket.GroupID(group)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("socket_group %s: the passed socket: %w", group, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Gid) != gid {
		return fmt.Errorf("socket_group %s (gid %d) is set but the socket systemd passed, %s, belongs to gid %d: set SocketGroup=%s in its .socket unit, or drop socket_group", group, gid, path, st.Gid, group)
	}
	return nil
}

// selfProbe asks the service's own socket for its health the way any client
// would, so a watchdog ping proves the listener and the server both answer.
// Only the notifier's ping goroutine calls check, and close runs after it ended.
type selfProbe struct {
	path string
	cc   *grpc.ClientConn
}

func (p *selfProbe) check(ctx context.Context) error {
	if p.cc == nil {
		cc, err := grpcclient.Dial(p.path)
		if err != nil {
			return err
		}
		p.cc = cc
	}
	st, err := grpcclient.Check(ctx, p.cc, "")
	if err != nil {
		return err
	}
	if st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health is %s", st)
	}
	return nil
}

func (p *selfProbe) close() {
	if p.cc != nil {
		_ = p.cc.Close()
	}
}

// debugMux serves /metrics, and /debug/pprof/ as well with --debug.
func debugMux(c *Common, reg *prometheus.Registry, extra []prometheus.Gatherer) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", MetricsHandler(reg, extra...))
	if c.Debug {
		HandlePprof(mux)
	}
	return mux
}

// setupLogging builds the service's logger and makes it the process's: the
// slog default, and klog's, so client-go's informers, event recorders and
// the other Kubernetes libraries log in log_format through the same handler.
func setupLogging(c *Common, name string, w *os.File) (*slog.Logger, error) {
	log, err := NewLogger(c.LogLevel, c.LogFormat, w)
	if err != nil {
		return nil, err
	}
	log = log.With("service", name)
	slog.SetDefault(log)
	routeKlog(log.Handler())
	return log, nil
}

// NewLogger builds the slog logger for a level and format name.
func NewLogger(level, format string, w *os.File) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log_level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log_format %q: want text or json", format)
	}
}
