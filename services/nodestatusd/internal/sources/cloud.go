package sources

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/grpcclient"
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
	endpoint string
	cache    ttlCache[CloudState]

	dialOnce sync.Once
	dialErr  error
	cc       *grpc.ClientConn
	client   cloudsyncv1.CloudSyncServiceClient
}

// NewCloud returns a cloudsyncd source.
func NewCloud(endpoint string, maxAge time.Duration) *Cloud {
	return &Cloud{endpoint: endpoint, cache: ttlCache[CloudState]{maxAge: maxAge, now: time.Now}}
}

// Close releases the connection.
func (c *Cloud) Close() {
	if c.cc != nil {
		_ = c.cc.Close()
	}
}

// Get returns a reading no older than maxAge.
func (c *Cloud) Get(ctx context.Context) CloudState { return c.cache.get(ctx, c.read) }

func (c *Cloud) read(ctx context.Context) CloudState {
	c.dialOnce.Do(func() {
		c.cc, c.dialErr = grpcclient.Dial(c.endpoint)
		if c.dialErr == nil {
			c.client = cloudsyncv1.NewCloudSyncServiceClient(c.cc)
		}
	})
	if c.dialErr != nil {
		return CloudState{Err: fmt.Errorf("cloudsyncd at %s: %w", c.endpoint, c.dialErr)}
	}
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	var st CloudState
	resp, err := c.client.GetNodeAddresses(cctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if status.Code(err) == codes.FailedPrecondition {
		return CloudState{NotConfigured: true}
	}
	if err != nil {
		return CloudState{Err: fmt.Errorf("cloudsyncd at %s: %w", c.endpoint, err)}
	}
	for i, b := range resp.GetAddresses() {
		var a corev1.NodeAddress
		if err := a.Unmarshal(b); err != nil {
			return CloudState{Err: fmt.Errorf("cloudsyncd at %s: address %d: %w", c.endpoint, i, err)}
		}
		st.Addresses = append(st.Addresses, a)
	}
	md, err := c.client.GetInstanceMetadata(cctx, &cloudsyncv1.GetInstanceMetadataRequest{})
	if err == nil {
		st.Metadata = md
	}
	return st
}
