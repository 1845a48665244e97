package grpcserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
)

// panicky is a health server whose Check panics, to exercise recovery with a
// real generated service.
type panicky struct {
	testgrpc.UnimplementedTestServiceServer
}

func (panicky) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	panic("boom")
}

func start(t *testing.T, reg prometheus.Registerer) (*Server, *grpc.ClientConn) {
	t.Helper()
	return startWith(t, reg, nil)
}

func startWith(t *testing.T, reg prometheus.Registerer, register func(*grpc.Server)) (*Server, *grpc.ClientConn) {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "gs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	lis, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := New(slog.New(slog.NewTextHandler(io.Discard, nil)), WithRegistry(reg))
	if register != nil {
		register(s.GRPC())
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(time.Second) })
	cc, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return s, cc
}

func TestHealthNotServingUntilReady(t *testing.T) {
	s, cc := start(t, prometheus.NewRegistry())
	hc := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before ready: %v, want NOT_SERVING", resp.Status)
	}
	s.SetServing(true)
	resp, err = hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after ready: %v, want SERVING", resp.Status)
	}
}

func TestPanicBecomesInternalAndIsCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, cc := startWith(t, reg, func(g *grpc.Server) { testgrpc.RegisterTestServiceServer(g, panicky{}) })
	s.SetServing(true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		_, err := testgrpc.NewTestServiceClient(cc).EmptyCall(ctx, &testgrpc.Empty{})
		if status.Code(err) != codes.Internal {
			t.Fatalf("call %d: code %v (%v), want Internal", i, status.Code(err), err)
		}
		// The panic value stays in the service's log.
		if msg := status.Convert(err).Message(); msg != "internal error" {
			t.Fatalf("call %d: caller was told %q, want the generic \"internal error\"", i, msg)
		}
	}
	// The process lives on: health still answers.
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("server unusable after panics: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["grpc_method"] == "EmptyCall" && labels["grpc_code"] == "Internal" {
				counted += m.GetCounter().GetValue()
			}
		}
	}
	if counted != 3 {
		t.Fatalf("Internal EmptyCall calls counted = %v, want 3", counted)
	}
}

func TestAccessLogLevels(t *testing.T) {
	for _, tc := range []struct {
		code codes.Code
		want logging.Level
	}{
		{codes.OK, logging.LevelDebug},
		{codes.NotFound, logging.LevelDebug},
		{codes.FailedPrecondition, logging.LevelDebug}, // e.g. no cloud provider: a state, not news
		{codes.Unavailable, logging.LevelDebug},
		{codes.InvalidArgument, logging.LevelInfo},
		{codes.PermissionDenied, logging.LevelInfo},
		{codes.Internal, logging.LevelError},
		{codes.Unknown, logging.LevelError},
	} {
		if got := codeToLevel(tc.code); got != tc.want {
			t.Errorf("%v logged at %v, want %v", tc.code, got, tc.want)
		}
	}
}

// sizedAndStreaming answers UnaryCall with a payload of the size asked for
// and holds StreamingOutputCall open after one message until the caller leaves.
type sizedAndStreaming struct {
	testgrpc.UnimplementedTestServiceServer
}

func (sizedAndStreaming) UnaryCall(_ context.Context, req *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: make([]byte, req.GetResponseSize())}}, nil
}

func (sizedAndStreaming) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, s testgrpc.TestService_StreamingOutputCallServer) error {
	if err := s.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// serveSized serves sizedAndStreaming from New(opts) on a real socket and
// dials it the way every microlet client does (grpcclient.Dial).
func serveSized(t *testing.T, opts ...Option) testgrpc.TestServiceClient {
	t.Helper()
	dir := testenv.ShortDir(t, "gs")
	lis, err := socket.Listen(filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s := New(slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
	testgrpc.RegisterTestServiceServer(s.GRPC(), sizedAndStreaming{})
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(time.Second) })
	cc, err := grpcclient.Dial(socket.Endpoint(lis.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// A request larger than gRPC's default 4 MiB receive limit (a pod whose
// manifest podconfig accepted, 10 MiB, with its status) reaches the handler,
// and an answer as large comes back.
func TestServerAcceptsWhatClientsSend(t *testing.T) {
	c := serveSized(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, size := range []int{5 << 20, 12 << 20} {
		resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{
			ResponseSize: int32(size),
			Payload:      &testgrpc.Payload{Body: make([]byte, size)},
		})
		if err != nil {
			t.Fatalf("%d MiB request: %v", size>>20, err)
		}
		if got := len(resp.GetPayload().GetBody()); got != size {
			t.Fatalf("%d MiB answer: got %d bytes", size>>20, got)
		}
	}
}

// Streams beyond the cap are refused with ResourceExhausted naming the cap;
// once one ends, a new one is taken again.
func TestStreamCap(t *testing.T) {
	const max = 3
	c := serveSized(t, WithMaxStreams(max))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	open := func(ctx context.Context) (testgrpc.TestService_StreamingOutputCallClient, error) {
		s, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
		if err != nil {
			return nil, err
		}
		// The first message proves the handler runs (and holds its slot).
		_, err = s.Recv()
		return s, err
	}
	cancels := make([]context.CancelFunc, 0, max)
	for i := 0; i < max; i++ {
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		if _, err := open(sctx); err != nil {
			t.Fatalf("stream %d of %d: %v", i+1, max, err)
		}
		cancels = append(cancels, scancel)
	}
	_, err := open(ctx)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "3 streams already open") {
		t.Fatalf("stream over the cap: %v, want ResourceExhausted naming the cap", err)
	}
	// Unary calls are not streams: they still pass.
	if _, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}); err != nil {
		t.Fatalf("unary call while streams are at the cap: %v", err)
	}
	cancels[0]()
	// The server sees the cancellation on its own schedule; poll until the
	// freed slot is taken, up to the test's deadline.
	err = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		sctx, scancel := context.WithCancel(ctx)
		_, err := open(sctx)
		if status.Code(err) == codes.ResourceExhausted {
			scancel()
			return false, nil
		}
		t.Cleanup(scancel)
		return true, err
	})
	if err != nil {
		t.Fatalf("stream after one closed: %v", err)
	}
}
