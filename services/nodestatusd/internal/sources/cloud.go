package sources

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
)

// CloudState is one reading of cloudsyncd.
type CloudState struct {
	// Err is set when cloudsyncd could not be asked or has no answer yet.
	Err error
	// NotConfigured is true when cloudsyncd runs without a provider; the
	// node then uses its own addresses and no cloud labels.
	NotConfigured bool
	Addresses     []corev1.NodeAddress
	// Metadata is nil unless the provider answered.
	Metadata *cloudsyncv1.GetInstanceMetadataResponse
}

// Cloud is a cached cloudsyncd client.
type Cloud struct {
	cachedPeer[cloudsyncv1.CloudSyncServiceClient, CloudState]
}

// NewCloud returns a cloudsyncd source; readings younger than maxAge are
// reused.
func NewCloud(endpoint string, maxAge time.Duration) *Cloud {
	c := &Cloud{}
	c.cachedPeer = newCachedPeer("cloudsyncd", endpoint, cloudsyncv1.NewCloudSyncServiceClient, maxAge, c.read,
		func(err error) CloudState { return CloudState{Err: err} })
	return c
}

func (c *Cloud) read(ctx context.Context, client cloudsyncv1.CloudSyncServiceClient) CloudState {
	var st CloudState
	resp, err := client.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if status.Code(err) == codes.FailedPrecondition {
		return CloudState{NotConfigured: true}
	}
	if err != nil {
		return CloudState{Err: c.peer.wrap(err)}
	}
	for i, b := range resp.GetAddresses() {
		var a corev1.NodeAddress
		if err := a.Unmarshal(b); err != nil {
			return CloudState{Err: c.peer.wrap(fmt.Errorf("address %d: %w", i, err))}
		}
		st.Addresses = append(st.Addresses, a)
	}
	md, err := client.GetInstanceMetadata(ctx, &cloudsyncv1.GetInstanceMetadataRequest{})
	if err == nil {
		st.Metadata = md
	}
	return st
}
