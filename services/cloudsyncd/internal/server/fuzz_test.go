package server_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
	"github.com/microlet/microlet/services/cloudsyncd/internal/server"
)

// cloudFuzzMethods are CloudSyncService's RPCs by the fuzz target's method
// argument modulo 3; cloudFuzzCalls makes the calls in the same order.
var cloudFuzzMethods = []string{"GetNodeAddresses", "WatchNodeAddresses", "GetInstanceMetadata"}

func cloudFuzzCalls(c cloudsyncv1.CloudSyncServiceClient) []func(context.Context, []byte) error {
	return []func(context.Context, []byte) error{
		servicetest.FuzzCall(c.GetNodeAddresses),
		servicetest.FuzzFirst(c.WatchNodeAddresses),
		servicetest.FuzzCall(c.GetInstanceMetadata),
	}
}

// startInProcess runs cloudsyncd in the test's process (servicetest.Start:
// its grpcserver, interceptors and recovery) with provider "static" reading
// file, or with no provider when file is empty, serving on name.sock in
// dir. node_init is off: it needs a control plane and is not behind the API.
func startInProcess(tb testing.TB, dir, name, file string) cloudsyncv1.CloudSyncServiceClient {
	tb.Helper()
	s := server.New()
	cfg := s.Config().(*server.Config)
	cfg.RunDir, cfg.DataDir = dir, dir
	cfg.NodeInit = false
	if file != "" {
		cfg.CloudProvider, cfg.StaticFile = "static", file
	}
	sock := filepath.Join(dir, name+".sock")
	return cloudsyncv1.NewCloudSyncServiceClient(servicetest.Start(tb, s, sock, servicetest.WithLogLevel(slog.LevelWarn)).Dial(tb))
}

// FuzzCloudSyncAPI sends arbitrary requests to cloudsyncd's three RPCs on
// two real in-process servers: methods 0-2 to one whose static provider
// has the node's addresses (every call must succeed, a watch must send its
// first message at once), 3-5 to one with no provider (every call must
// answer FailedPrecondition). A panic (recovery answers Internal), a hang
// past the deadline or any other answer fails.
func FuzzCloudSyncAPI(f *testing.F) {
	dir := testenv.ShortDir(f, "csfz")
	file := filepath.Join(dir, "cloud.yaml")
	writeFile(f, file, staticDoc("10.0.0.1", false))
	static := startInProcess(f, dir, "static", file)
	none := startInProcess(f, dir, "none", "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// GetNodeAddresses waits for the provider's first answer: once it has
	// one, every call below can be answered at once.
	if _, err := static.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{}); err != nil {
		f.Fatal(err)
	}
	calls := append(cloudFuzzCalls(static), cloudFuzzCalls(none)...)
	want := []codes.Code{codes.OK, codes.FailedPrecondition}
	// The seeds are testdata/fuzz/FuzzCloudSyncAPI (TestWriteCloudFuzzSeeds).
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		// Bytes that are no request are not sent (FuzzCall answers nil):
		// every request here is an empty message, so one decoding tells.
		if proto.Unmarshal(data, &cloudsyncv1.GetNodeAddressesRequest{}) != nil {
			return
		}
		i := int(method) % len(calls)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := calls[i](ctx, data); status.Code(err) != want[i/3] {
			t.Fatalf("%s(%x) with provider %v: %v, want %v", cloudFuzzMethods[i%3], data, i < 3, err, want[i/3])
		}
	})
}

// TestWriteCloudFuzzSeeds writes the committed corpus in
// testdata/fuzz/FuzzCloudSyncAPI (with MICROLET_WRITE_FUZZ_SEEDS=1): the
// requests nodestatusd's cloud source sends (GetNodeAddresses,
// GetInstanceMetadata) and a watcher's, all empty messages, to each server.
func TestWriteCloudFuzzSeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzCloudSyncAPI")
	}
	reqs := []proto.Message{&cloudsyncv1.GetNodeAddressesRequest{}, &cloudsyncv1.WatchNodeAddressesRequest{}, &cloudsyncv1.GetInstanceMetadataRequest{}}
	for i, prefix := range []string{"static-", "none-"} {
		for j, r := range reqs {
			testenv.WriteFuzzSeed(t, "FuzzCloudSyncAPI", prefix+cloudFuzzMethods[j], uint8(3*i+j), r)
		}
	}
}
