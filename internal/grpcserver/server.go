package grpcserver

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/microlet/microlet/internal/grpcclient"
)

// DefaultMaxStreams is how many streaming calls (watches) one server keeps
// open at once unless WithMaxStreams says otherwise. A node has a handful of
// watchers per service (podsyncd, statusd, nodeapi, a CLI or two); the cap is
// there so a caller that opens watches in a loop cannot exhaust the service.
const DefaultMaxStreams = 64

// Server wraps a grpc.Server with health, metrics, logging and recovery.
type Server struct {
	grpc   *grpc.Server
	health *health.Server
	log    *slog.Logger
}

type options struct {
	registry   prometheus.Registerer
	reflection bool
	maxStreams int
	extra      []grpc.ServerOption
}

// Option configures New.
type Option func(*options)

// WithRegistry registers the server's gRPC metrics in reg.
func WithRegistry(reg prometheus.Registerer) Option { return func(o *options) { o.registry = reg } }

// WithReflection enables the gRPC reflection service (debug mode only).
func WithReflection(on bool) Option { return func(o *options) { o.reflection = on } }

// WithMaxStreams caps the streaming calls open at once; the next one is
// refused with ResourceExhausted until one ends. n <= 0 keeps the default.
func WithMaxStreams(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxStreams = n
		}
	}
}

// WithServerOptions adds raw grpc.ServerOptions.
func WithServerOptions(opts ...grpc.ServerOption) Option {
	return func(o *options) { o.extra = append(o.extra, opts...) }
}

// New builds a server whose health reports NOT_SERVING until SetServing(true).
func New(log *slog.Logger, opts ...Option) *Server {
	o := options{maxStreams: DefaultMaxStreams}
	for _, opt := range opts {
		opt(&o)
	}
	metrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
	if o.registry != nil {
		o.registry.MustRegister(metrics)
	}
	recover := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		// The panic and its stack stay in the service's log: what a
		// handler panicked on is no business of the caller's.
		method, _ := grpc.Method(ctx)
		log.ErrorContext(ctx, "panic in gRPC handler", "method", method, "panic", p, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	logger := logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	})
	logOpts := []logging.Option{logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(codeToLevel)}
	sopts := []grpc.ServerOption{
		// The server takes what microlet's clients may send (grpcclient):
		// one limit, so a pod whose manifest podconfig accepted is not
		// refused later as a status or a watch event.
		grpc.MaxRecvMsgSize(grpcclient.MaxMessageSize),
		// A socket.WithPeers listener's verdict on each peer reaches the
		// calls, refused ones get PermissionDenied (before anything else
		// runs, after logging so the refusal is in the log).
		grpc.Creds(newPeerCreds()),
		// Order: metrics outermost, then logging, recovery innermost so a panic
		// is counted and logged as the Internal error it becomes. The stream
		// cap sits after logging so a refused watch is logged and counted.
		grpc.ChainUnaryInterceptor(
			metrics.UnaryServerInterceptor(),
			logging.UnaryServerInterceptor(logger, logOpts...),
			unaryPeerCheck,
			recovery.UnaryServerInterceptor(recover),
		),
		grpc.ChainStreamInterceptor(
			metrics.StreamServerInterceptor(),
			logging.StreamServerInterceptor(logger, logOpts...),
			streamPeerCheck,
			streamLimit(o.maxStreams),
			recovery.StreamServerInterceptor(recover),
		),
	}
	s := &Server{grpc: grpc.NewServer(append(sopts, o.extra...)...), health: health.NewServer(), log: log}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if o.reflection {
		reflection.Register(s.grpc)
	}
	metrics.InitializeMetrics(s.grpc)
	return s
}

// streamLimit refuses a streaming call while max others are open. A watch
// holds its goroutine and its per-watcher queue for as long as it lives, so
// their number is what bounds a service's memory for watchers; each queue is
// bounded by its owner (a watcher that falls behind is resynced or dropped).
func streamLimit(max int) grpc.StreamServerInterceptor {
	var open atomic.Int64
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if n := open.Add(1); n > int64(max) {
			open.Add(-1)
			return status.Errorf(codes.ResourceExhausted, "%s: %d streams already open, the most this service keeps; close a watch and retry", info.FullMethod, max)
		}
		defer open.Add(-1)
		return handler(srv, ss)
	}
}

// codeToLevel is the access log's level per answer. Routine answers are
// debug, so a node's log holds state changes, not calls: successes, and the
// answers that describe a state the caller asked about and handles itself
// (not found, no cloud provider configured (FailedPrecondition), a
// dependency down (Unavailable), a deadline the caller set). The service
// says such a state once, where it changes. Bad input and refused callers
// are info; server-side failures are errors.
func codeToLevel(c codes.Code) logging.Level {
	switch c {
	case codes.OK, codes.Canceled, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
		codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange:
		return logging.LevelDebug
	case codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted:
		return logging.LevelInfo
	default:
		return logging.LevelError
	}
}

// GRPC returns the server to register services on (before Serve).
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// SetServing flips the overall health and that of every registered service.
func (s *Server) SetServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	for name := range s.grpc.GetServiceInfo() {
		s.health.SetServingStatus(name, st)
	}
}

// Serve serves on lis until Stop; it returns nil after a Stop.
func (s *Server) Serve(lis net.Listener) error {
	if err := s.grpc.Serve(lis); err != nil && err != grpc.ErrServerStopped {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// Stop reports NOT_SERVING to health watchers, drains calls for up to timeout,
// then closes whatever is left (streams that never end on their own).
func (s *Server) Stop(timeout time.Duration) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		s.log.Warn("graceful stop timed out; closing remaining calls", "timeout", timeout)
		s.grpc.Stop()
		<-done
	}
}
