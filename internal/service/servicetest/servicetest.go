package servicetest

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/grpcserver"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
)

// Running is a service started by Start.
type Running struct {
	// Socket is the unix socket the service listens on.
	Socket string
	// Env is the environment the service was registered and run with; its
	// Registry holds the service's metrics.
	Env *service.Env
	// Logs is everything the service logged at the Start option's level
	// (Info by default), also written to t.Log.
	Logs *testenv.LockedBuffer
}

type options struct {
	level slog.Level
}

// Option configures Start.
type Option func(*options)

// WithLogLevel sets the lowest level the service's logger passes on.
func WithLogLevel(l slog.Level) Option { return func(o *options) { o.level = l } }

// Start registers svc (its Config already set by the test), serves it on
// sock and runs it until the test ends. A Register error fails t.
func Start(t testing.TB, svc service.Service, sock string, opts ...Option) *Running {
	t.Helper()
	o := options{level: slog.LevelInfo}
	for _, f := range opts {
		f(&o)
	}
	r := &Running{Socket: sock, Logs: &testenv.LockedBuffer{}}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(tbWriter{t}, r.Logs), &slog.HandlerOptions{Level: o.level}))
	reg := prometheus.NewRegistry()
	r.Env = &service.Env{Log: log, Registry: reg, Common: svc.Config().CommonConfig(), Server: grpcserver.New(log, grpcserver.WithRegistry(reg))}
	if err := svc.Register(r.Env); err != nil {
		t.Fatalf("register %s: %v", svc.Name(), err)
	}
	lis, err := socket.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.Env.Server.Serve(lis) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Run(ctx, r.Env); close(done) }()
	t.Cleanup(func() {
		cancel()
		r.Env.Server.Stop(5 * time.Second)
		<-done
	})
	return r
}

// Dial connects to the service's socket; the connection closes when the
// test ends.
func (r *Running) Dial(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpcclient.Dial(socket.Endpoint(r.Socket), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// tbWriter hands each log line to t.Log.
type tbWriter struct{ t testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Serve serves the gRPC services register adds (fakes of a service's
// peers: a CRI runtime, cloudsyncd) on a unix socket at sock until the test
// ends.
func Serve(t testing.TB, sock string, register func(*grpc.Server)) {
	t.Helper()
	lis, err := socket.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// ServeAPI serves the gRPC services register adds the way a service binary
// does (grpcserver: its interceptors, message limit and stream cap) on a
// unix socket at sock, and returns a connection to it made the way
// microlet's clients make one (grpcclient). Both end with the test. For
// tests of a service's own API handlers, without the rest of the service.
func ServeAPI(tb testing.TB, sock string, register func(*grpc.Server)) *grpc.ClientConn {
	tb.Helper()
	lis, err := socket.Listen(sock)
	if err != nil {
		tb.Fatal(err)
	}
	srv := grpcserver.New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	register(srv.GRPC())
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(func() { srv.Stop(time.Second) })
	cc, err := grpcclient.Dial(socket.Endpoint(sock))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// FuzzCall turns a generated client method into what a fuzz target calls
// with arbitrary bytes: they are decoded as the method's request and sent;
// bytes that are no such request are skipped (nil).
//
//	call := servicetest.FuzzCall(client.SetPodStatus)
//	err := call(ctx, data)
func FuzzCall[Req any, PReq interface {
	*Req
	proto.Message
}, Resp any](method func(context.Context, PReq, ...grpc.CallOption) (Resp, error)) func(context.Context, []byte) error {
	return func(ctx context.Context, b []byte) error {
		req := PReq(new(Req))
		if proto.Unmarshal(b, req) != nil {
			return nil
		}
		_, err := method(ctx, req)
		return err
	}
}

// FuzzFirst is FuzzCall for a server-streaming method: the bytes are
// decoded as its request, the stream is opened and its first message
// received, and the stream is then cancelled. The error is the opening's or
// the first Recv's.
//
//	call := servicetest.FuzzFirst(client.WatchNodeAddresses)
func FuzzFirst[Req any, PReq interface {
	*Req
	proto.Message
}, Resp any](method func(context.Context, PReq, ...grpc.CallOption) (grpc.ServerStreamingClient[Resp], error)) func(context.Context, []byte) error {
	return func(ctx context.Context, b []byte) error {
		req := PReq(new(Req))
		if proto.Unmarshal(b, req) != nil {
			return nil
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := method(ctx, req)
		if err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	}
}
