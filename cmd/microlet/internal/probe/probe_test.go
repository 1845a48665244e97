package probe

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// serve runs a gRPC server on a fresh unix socket; withHealth registers the
// health service in the given state.
func serve(t *testing.T, withHealth bool, st healthpb.HealthCheckResponse_ServingStatus) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "prb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if withHealth {
		h := health.NewServer()
		h.SetServingStatus("", st)
		healthpb.RegisterHealthServer(srv, h)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "unix://" + path
}

func TestHealth(t *testing.T) {
	tests := []struct {
		name string
		ep   func(t *testing.T) string
		want supervisorv1.Health
	}{
		{"serving", func(t *testing.T) string { return serve(t, true, healthpb.HealthCheckResponse_SERVING) }, supervisorv1.Health_HEALTH_SERVING},
		{"not serving", func(t *testing.T) string { return serve(t, true, healthpb.HealthCheckResponse_NOT_SERVING) }, supervisorv1.Health_HEALTH_NOT_SERVING},
		// A peer without a health service still answers gRPC.
		{"no health service", func(t *testing.T) string { return serve(t, false, 0) }, supervisorv1.Health_HEALTH_SERVING},
		{"nothing listening", func(t *testing.T) string { return "unix://" + filepath.Join(t.TempDir(), "none.sock") }, supervisorv1.Health_HEALTH_DOWN},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if got := Health(ctx, tc.ep(t)).Health; got != tc.want {
				t.Errorf("Health = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPeerPIDAndStartTime(t *testing.T) {
	ep := serve(t, true, healthpb.HealthCheckResponse_SERVING)
	if pid := PeerPID(ep); pid != os.Getpid() {
		t.Errorf("PeerPID = %d, want this process %d", pid, os.Getpid())
	}
	st := StartTime(os.Getpid())
	if st.IsZero() || st.After(time.Now()) || time.Since(st) > 24*time.Hour {
		t.Errorf("StartTime = %v, want a moment before now", st)
	}
	if PeerPID("unix:///nonexistent/x.sock") != 0 || !StartTime(0).IsZero() {
		t.Errorf("absent peer must give 0 and the zero time")
	}
}
