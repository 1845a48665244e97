package grpcclient

import (
	"context"
	"fmt"
	"math"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/microlet/microlet/internal/socket"
)

// MaxMessageSize is the largest message microlet's clients send and receive,
// and the largest its servers (grpcserver) receive: one limit for both ends.
// A snapshot of thousands of pods, or one pod whose manifest is as large as
// podconfig accepts (10 MiB) with its status, is far larger than gRPC's
// 4 MiB default.
const MaxMessageSize = 256 << 20

// Dial returns a lazily connecting client for a unix endpoint ("unix:///path"
// or a bare path). It never blocks; calls wait for the connection.
func Dial(endpoint string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	path, err := socket.PathFromEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if err := socket.CheckPath(path); err != nil {
		return nil, err
	}
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  100 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   5 * time.Second,
			},
			MinConnectTimeout: 2 * time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
	}
	cc, err := grpc.NewClient("unix://"+path, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", endpoint, err)
	}
	return cc, nil
}

// Check asks the peer's health service once.
func Check(ctx context.Context, cc *grpc.ClientConn, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return healthpb.HealthCheckResponse_UNKNOWN, err
	}
	return resp.GetStatus(), nil
}

// WaitServing polls health until SERVING or ctx ends, returning the last error.
func WaitServing(ctx context.Context, cc *grpc.ClientConn, service string) error {
	delay := wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: time.Second}.DelayFunc()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := Check(cctx, cc, service)
		cancel()
		if err == nil && st == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("health is %s", st)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not serving: %w (last: %v)", cc.Target(), ctx.Err(), last)
		case <-time.After(delay()):
		}
	}
}
