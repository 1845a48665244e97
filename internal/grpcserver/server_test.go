package grpcserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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
