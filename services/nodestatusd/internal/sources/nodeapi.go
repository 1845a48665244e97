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
	cachedPeer[nodeapiv1.NodeAPIServiceClient, NodeAPIState]
}

// NewNodeAPI returns a nodeapi source; readings younger than maxAge are reused.
func NewNodeAPI(endpoint string, maxAge time.Duration) *NodeAPI {
	n := &NodeAPI{}
	n.cachedPeer = newCachedPeer("nodeapi", endpoint, nodeapiv1.NewNodeAPIServiceClient, maxAge, n.read,
		func(err error) NodeAPIState { return NodeAPIState{Err: err} })
	return n
}

func (n *NodeAPI) read(ctx context.Context, client nodeapiv1.NodeAPIServiceClient) NodeAPIState {
	resp, err := client.GetServingInfo(ctx, &nodeapiv1.GetServingInfoRequest{})
	if err != nil {
		return NodeAPIState{Err: n.peer.wrap(err)}
	}
	if resp.GetPort() <= 0 {
		return NodeAPIState{Err: n.peer.wrap(errNoPort)}
	}
	return NodeAPIState{Port: resp.GetPort()}
}
