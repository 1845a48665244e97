package sources

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/microlet/microlet/internal/grpcclient"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
)

// NodeAPIState is one reading of nodeapi.
type NodeAPIState struct {
	// Err is set when nodeapi could not be asked or is not listening yet.
	Err error
	// Port is the TCP port the kubelet API really serves.
	Port int32
}

// NodeAPI is a cached client of nodeapi's serving information, so the Node
// advertises the port that really serves the kubelet API.
type NodeAPI struct {
	endpoint string
	cache    ttlCache[NodeAPIState]

	dialOnce sync.Once
	dialErr  error
	cc       *grpc.ClientConn
	client   nodeapiv1.NodeAPIServiceClient
}

// NewNodeAPI returns a nodeapi source; readings younger than maxAge are reused.
func NewNodeAPI(endpoint string, maxAge time.Duration) *NodeAPI {
	return &NodeAPI{endpoint: endpoint, cache: ttlCache[NodeAPIState]{maxAge: maxAge, now: time.Now}}
}

// Close releases the connection.
func (n *NodeAPI) Close() {
	if n.cc != nil {
		_ = n.cc.Close()
	}
}

// Get returns a reading no older than maxAge.
func (n *NodeAPI) Get(ctx context.Context) NodeAPIState { return n.cache.get(ctx, n.read) }

func (n *NodeAPI) read(ctx context.Context) NodeAPIState {
	n.dialOnce.Do(func() {
		n.cc, n.dialErr = grpcclient.Dial(n.endpoint)
		if n.dialErr == nil {
			n.client = nodeapiv1.NewNodeAPIServiceClient(n.cc)
		}
	})
	if n.dialErr != nil {
		return NodeAPIState{Err: fmt.Errorf("nodeapi at %s: %w", n.endpoint, n.dialErr)}
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := n.client.GetServingInfo(cctx, &nodeapiv1.GetServingInfoRequest{})
	if err != nil {
		return NodeAPIState{Err: fmt.Errorf("nodeapi at %s: %w", n.endpoint, err)}
	}
	if resp.GetPort() <= 0 {
		return NodeAPIState{Err: fmt.Errorf("nodeapi at %s: no port", n.endpoint)}
	}
	return NodeAPIState{Port: resp.GetPort()}
}
