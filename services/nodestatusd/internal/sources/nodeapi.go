package sources

import (
	"context"
	"time"

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
	peer  peer[nodeapiv1.NodeAPIServiceClient]
	cache ttlCache[NodeAPIState]
}

// NewNodeAPI returns a nodeapi source; readings younger than maxAge are reused.
func NewNodeAPI(endpoint string, maxAge time.Duration) *NodeAPI {
	return &NodeAPI{peer: newPeer("nodeapi", endpoint, nodeapiv1.NewNodeAPIServiceClient),
		cache: ttlCache[NodeAPIState]{maxAge: maxAge, now: time.Now}}
}

// Close releases the connection.
func (n *NodeAPI) Close() { n.peer.close() }

// Get returns a reading no older than maxAge.
func (n *NodeAPI) Get(ctx context.Context) NodeAPIState { return n.cache.get(ctx, n.read) }

func (n *NodeAPI) read(ctx context.Context) NodeAPIState {
	client, err := n.peer.get()
	if err != nil {
		return NodeAPIState{Err: err}
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	resp, err := client.GetServingInfo(cctx, &nodeapiv1.GetServingInfoRequest{})
	if err != nil {
		return NodeAPIState{Err: n.peer.wrap(err)}
	}
	if resp.GetPort() <= 0 {
		return NodeAPIState{Err: n.peer.wrap(errNoPort)}
	}
	return NodeAPIState{Port: resp.GetPort()}
}
