package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// fuzzMethods are PodSyncService's RPCs by the fuzz target's method
// argument; the target's calls are in the same order.
var fuzzMethods = []string{"ListPodWorkers", "GetNodePressure", "GetMetrics", "GetDeviceResources"}

// getMetricsMethod is GetMetrics' index in fuzzMethods.
const getMetricsMethod = 2

// FuzzPodSyncAPI sends arbitrary requests to podsyncd's four RPCs on a real
// podsyncd running in the test's process (servicetest.Start: grpcserver,
// interceptors, recovery) once its sync loop, eviction manager and device
// manager are published. Its runtime is servicetest.ServeConnectOnlyCRI,
// the stand-in TestHandlersDuringStartup uses (the handlers answer from
// podsyncd's own state, not the runtime's); its peers are absent. Every call must
// succeed, except GetMetrics for a set other than KUBELET or PROBES, which
// must answer InvalidArgument. A panic (recovery answers Internal), a hang
// past the deadline or any other answer fails.
func FuzzPodSyncAPI(f *testing.F) {
	dir := testenv.ShortDir(f, "psfz")
	servicetest.ServeConnectOnlyCRI(f, filepath.Join(dir, "runtime.sock"))
	s, c := startInDir(f, dir)
	testenv.Eventually(f, "sync loop, eviction and device managers published", time.Minute, func() error {
		if s.loop.Load() == nil || s.evictions.Load() == nil || s.devices.Load() == nil {
			return errors.New("not yet")
		}
		return nil
	})
	calls := []func(context.Context, []byte) error{
		servicetest.FuzzCall(c.ListPodWorkers),
		servicetest.FuzzCall(c.GetNodePressure),
		servicetest.FuzzCall(c.GetMetrics),
		servicetest.FuzzCall(c.GetDeviceResources),
	}
	// The seeds are testdata/fuzz/FuzzPodSyncAPI (TestWriteFuzzSeeds).
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		i := int(method) % len(calls)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := calls[i](ctx, data)
		want := codes.OK
		if req := (&podsyncv1.GetMetricsRequest{}); i == getMetricsMethod && proto.Unmarshal(data, req) == nil &&
			req.GetSet() != podsyncv1.MetricsSet_METRICS_SET_KUBELET && req.GetSet() != podsyncv1.MetricsSet_METRICS_SET_PROBES {
			want = codes.InvalidArgument
		}
		if status.Code(err) != want {
			t.Fatalf("%s(%x): %v, want %v", fuzzMethods[i], data, err, want)
		}
	})
}

// TestWriteFuzzSeeds writes the committed corpus in
// testdata/fuzz/FuzzPodSyncAPI (with MICROLET_WRITE_FUZZ_SEEDS=1): what
// podsyncd's callers send. nodestatusd polls GetNodePressure and
// GetDeviceResources, nodeapi asks GetMetrics for each set, and the pod
// workers are listed with an empty request.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzPodSyncAPI")
	}
	for _, seed := range []struct {
		name   string
		method uint8
		req    proto.Message
	}{
		{"ListPodWorkers", 0, &podsyncv1.ListPodWorkersRequest{}},
		{"GetNodePressure", 1, &podsyncv1.GetNodePressureRequest{}},
		{"GetMetrics-kubelet", getMetricsMethod, &podsyncv1.GetMetricsRequest{Set: podsyncv1.MetricsSet_METRICS_SET_KUBELET}},
		{"GetMetrics-probes", getMetricsMethod, &podsyncv1.GetMetricsRequest{Set: podsyncv1.MetricsSet_METRICS_SET_PROBES}},
		{"GetDeviceResources", 3, &podsyncv1.GetDeviceResourcesRequest{}},
	} {
		testenv.WriteFuzzSeed(t, "FuzzPodSyncAPI", seed.name, seed.method, seed.req)
	}
}
