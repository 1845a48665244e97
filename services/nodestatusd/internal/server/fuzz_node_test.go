package server

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
)

// fuzzNodeName is the node the FuzzNodeReads rig keeps.
const fuzzNodeName = "fuzz-node"

// FuzzNodeReads sends arbitrary GetNode and WatchNode requests (method 0
// and 1) to a standalone nodestatusd running in the test's process
// (servicetest.Start: grpcserver, interceptors, recovery) with a fake CRI
// on a unix socket. Once the Node is computed, GetNode for "" or the
// node's own name and every WatchNode's first message succeed; a node_name
// no Node can have is InvalidArgument; any other name is NotFound. A panic
// (recovery answers Internal), a hang past the deadline or any other
// answer fails.
func FuzzNodeReads(f *testing.F) {
	r := startRig(f, rigOpts{node: fuzzNodeName, noCloud: true})
	r.getNode("")
	calls := []func(context.Context, []byte) error{servicetest.FuzzCall(r.client.GetNode), servicetest.FuzzFirst(r.client.WatchNode)}
	// The seeds are testdata/fuzz/FuzzNodeReads (TestWriteNodeReadSeeds).
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		i := int(method) % len(calls)
		err := calls[i](ctx, data)
		want := codes.OK
		req := &nodestatusv1.GetNodeRequest{}
		if i == 0 && proto.Unmarshal(data, req) == nil {
			switch name := req.GetNodeName(); {
			case name == "" || name == fuzzNodeName:
			case len(validation.IsDNS1123Subdomain(name)) > 0:
				want = codes.InvalidArgument
			default:
				want = codes.NotFound
			}
		}
		if code := status.Code(err); code != want {
			t.Fatalf("method %d (%x): %v, want %s", i, data, err, want)
		}
	})
}

// nodeReadSeeds are what the CLI (microlet get node), nodeapi and the
// simulator send.
func nodeReadSeeds() map[string]struct {
	method uint8
	req    proto.Message
} {
	return map[string]struct {
		method uint8
		req    proto.Message
	}{
		"get":           {0, &nodestatusv1.GetNodeRequest{}},
		"get-own-name":  {0, &nodestatusv1.GetNodeRequest{NodeName: fuzzNodeName}},
		"get-elsewhere": {0, &nodestatusv1.GetNodeRequest{NodeName: "hollow-node-7"}},
		"get-bad-name":  {0, &nodestatusv1.GetNodeRequest{NodeName: "Not A Node/"}},
		"watch":         {1, &nodestatusv1.WatchNodeRequest{}},
	}
}

// TestWriteNodeReadSeeds writes nodeReadSeeds as the committed corpus in
// testdata/fuzz/FuzzNodeReads (with MICROLET_WRITE_FUZZ_SEEDS=1).
func TestWriteNodeReadSeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzNodeReads")
	}
	for name, s := range nodeReadSeeds() {
		testenv.WriteFuzzSeed(t, "FuzzNodeReads", name, s.method, s.req)
	}
}
