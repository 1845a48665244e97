package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
)

// FuzzReports sends arbitrary ReportNodeConditions and ReportReadyErrors
// requests (method 0 and 1) to nodestatusd's handlers on a real server
// (grpcserver on a unix socket): none may panic (recovery would answer
// Internal), hang, or be answered with anything but success or
// InvalidArgument.
func FuzzReports(f *testing.F) {
	a := newAPI(slog.New(slog.NewTextHandler(io.Discard, nil)))
	a.extra = setters.NewConditions(func() {})
	a.readyErrs = setters.NewReadyErrors(func() {})
	cc := servicetest.ServeAPI(f, filepath.Join(testenv.ShortDir(f, "nsfz"), "s.sock"),
		func(s *grpc.Server) { nodestatusv1.RegisterNodeStatusServiceServer(s, a) })
	c := nodestatusv1.NewNodeStatusServiceClient(cc)
	calls := []func(context.Context, []byte) error{servicetest.FuzzCall(c.ReportNodeConditions), servicetest.FuzzCall(c.ReportReadyErrors)}
	// The seeds are testdata/fuzz/FuzzReports (TestWriteReportSeeds).
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := calls[method%2](ctx, data)
		if code := status.Code(err); code != codes.OK && code != codes.InvalidArgument {
			t.Fatalf("method %d (%x): %v", method%2, data, err)
		}
	})
}

// reportSeeds are what a reporter (podsyncd's eviction manager, the runtime
// health check) sends.
func reportSeeds(tb testing.TB) map[string]proto.Message {
	cond, err := (&corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue, Reason: "KubeletHasInsufficientMemory", Message: "memory.available < 100Mi"}).Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return map[string]proto.Message{
		"conditions":   &nodestatusv1.ReportNodeConditionsRequest{Reporter: "podsyncd/eviction", Conditions: [][]byte{cond}},
		"ready-errors": &nodestatusv1.ReportReadyErrorsRequest{Reporter: "podsyncd/runtime", Errors: []string{"container runtime is down"}},
	}
}

// TestWriteReportSeeds writes reportSeeds as the committed corpus in
// testdata/fuzz/FuzzReports (with MICROLET_WRITE_FUZZ_SEEDS=1).
func TestWriteReportSeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzReports")
	}
	for name, req := range reportSeeds(t) {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		method := uint8(0)
		if _, ok := req.(*nodestatusv1.ReportReadyErrorsRequest); ok {
			method = 1
		}
		testenv.WriteFuzzSeed(t, "FuzzReports", name, method, b)
	}
}
