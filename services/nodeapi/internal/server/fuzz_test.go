package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
)

// FuzzNodeAPI sends arbitrary GetServingInfo requests to a real nodeapi
// running in the test's process (servicetest.Start: grpcserver,
// interceptors, recovery), standalone, its kubelet API listening with a
// self-signed certificate on a free loopback port. Its runtime is
// servicetest.ServeConnectOnlyCRI (GetServingInfo answers from nodeapi's
// own listener, not the runtime); its peers are absent. Once the kubelet API
// listens every call must succeed: a panic (recovery answers Internal), a
// hang past the deadline or any error fails.
func FuzzNodeAPI(f *testing.F) {
	dir := testenv.ShortDir(f, "nafz")
	servicetest.ServeConnectOnlyCRI(f, filepath.Join(dir, "runtime.sock"))
	s := New()
	s.cfg.RunDir = dir
	s.cfg.DataDir = filepath.Join(dir, "data")
	s.cfg.PodLogsDir = filepath.Join(dir, "pods")
	s.cfg.Address = "127.0.0.1"
	s.cfg.Port = 0
	running := servicetest.Start(f, s, filepath.Join(dir, "nodeapi.sock"), servicetest.WithLogLevel(slog.LevelWarn))
	c := nodeapiv1.NewNodeAPIServiceClient(running.Dial(f))
	testenv.Eventually(f, "the kubelet API listening", time.Minute, func() error {
		_, err := c.GetServingInfo(context.Background(), &nodeapiv1.GetServingInfoRequest{})
		return err
	})
	call := servicetest.FuzzCall(c.GetServingInfo)
	// The seeds are testdata/fuzz/FuzzNodeAPI (TestWriteFuzzSeeds).
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := call(ctx, data); status.Code(err) != codes.OK {
			t.Fatalf("GetServingInfo(%x): %v", data, err)
		}
	})
}

// TestWriteFuzzSeeds writes the committed corpus in
// testdata/fuzz/FuzzNodeAPI (with MICROLET_WRITE_FUZZ_SEEDS=1): the request
// nodestatusd's nodeapi source sends, an empty message.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzNodeAPI")
	}
	testenv.WriteFuzzSeed(t, "FuzzNodeAPI", "GetServingInfo", &nodeapiv1.GetServingInfoRequest{})
}
