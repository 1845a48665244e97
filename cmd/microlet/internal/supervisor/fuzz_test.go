package supervisor

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// FuzzSupervisorAPI sends arbitrary ListComponents requests to a real
// supervisor running in the test's process (Run: its grpcserver,
// interceptors and recovery on microlet.sock). The services are not built:
// every component with an endpoint setting is external, served by one
// SERVING gRPC health server, and podsyncd, which has none, is a stand-in
// script that sleeps (its binaries entry), so the answer holds serving,
// running-but-not-serving and external components. Every call must
// succeed: a panic (recovery answers Internal), a hang past the deadline or
// any error fails.
func FuzzSupervisorAPI(f *testing.F) {
	dir := testenv.ShortDir(f, "spfz")
	ext := filepath.Join(dir, "ext.sock")
	servicetest.Serve(f, ext, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, health.NewServer()) })
	sleeper := filepath.Join(dir, "podsyncd")
	if err := os.WriteFile(sleeper, []byte("#!/bin/sh\nexec sleep 3600\n"), 0o755); err != nil { //nolint:gosec // an executable stand-in
		f.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.RunDir = dir
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.NodeName = "fuzz-node"
	e := socket.Endpoint(ext)
	cfg.PodConfigEndpoint, cfg.StatusdEndpoint, cfg.NodeStatusdEndpoint = e, e, e
	cfg.CloudSyncdEndpoint, cfg.NodeAPIEndpoint, cfg.RuntimeEndpoint = e, e, e
	cfg.Binaries = map[string]string{components.PodSyncd: sleeper}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(cfg, WithLogger(discard), WithOutput(io.Discard, io.Discard))
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	f.Cleanup(func() {
		cancel()
		if err := <-runErr; err != nil {
			f.Errorf("supervisor Run: %v", err)
		}
	})
	cc, err := grpcclient.Dial(socket.Endpoint(cfg.Socket))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = cc.Close() })
	c := supervisorv1.NewSupervisorServiceClient(cc)
	testenv.Eventually(f, "podsyncd's stand-in started", time.Minute, func() error {
		resp, err := c.ListComponents(context.Background(), &supervisorv1.ListComponentsRequest{})
		if err != nil {
			return err
		}
		for _, comp := range resp.GetComponents() {
			if comp.GetName() == components.PodSyncd && comp.GetPid() != 0 {
				return nil
			}
		}
		return errors.New("podsyncd has no pid yet")
	})
	call := servicetest.FuzzCall(c.ListComponents)
	// The seeds are testdata/fuzz/FuzzSupervisorAPI (TestWriteFuzzSeeds).
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := call(ctx, data); status.Code(err) != codes.OK {
			t.Fatalf("ListComponents(%x): %v", data, err)
		}
	})
}

// TestWriteFuzzSeeds writes the committed corpus in
// testdata/fuzz/FuzzSupervisorAPI (with MICROLET_WRITE_FUZZ_SEEDS=1): the
// request `microlet status` sends, an empty message.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzSupervisorAPI")
	}
	testenv.WriteFuzzSeed(t, "FuzzSupervisorAPI", "ListComponents", &supervisorv1.ListComponentsRequest{})
}
