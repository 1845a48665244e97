package criclient

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/microlet/microlet/internal/grpcclient"
)

// DefaultAttemptTimeout bounds one attempt to reach an endpoint.
const DefaultAttemptTimeout = 5 * time.Second

// Backoff spaces the attempts: 100 ms doubling to 5 s, for as long as it
// takes.
var Backoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 5 * time.Second}

// Services are cri-client's runtime and image services of one node.
type Services struct {
	Runtime criapi.RuntimeService
	Images  criapi.ImageManagerService
	// Version is the runtime's answer to Version when it first answered.
	Version *runtimeapi.VersionResponse
}

// Close closes both services' connections.
func (s *Services) Close() {
	_ = s.Runtime.Close(context.Background())
	_ = s.Images.Close(context.Background())
}

type options struct {
	attempt time.Duration
}

// Option changes how Connect tries.
type Option func(*options)

// WithAttemptTimeout bounds each attempt to reach an endpoint (default
// DefaultAttemptTimeout).
func WithAttemptTimeout(d time.Duration) Option { return func(o *options) { o.attempt = d } }

// Connect returns cri-client's services on runtimeEndpoint and imageEndpoint
// ("" is the runtime's) with requestTimeout as their request timeout (the
// kubelet's --runtime-request-timeout; cri-client gives sandbox creation
// twice that, StopContainer and ExecSync the grace period or command timeout
// on top of it, and image pulls no limit). Until the runtime answers
// Version and the image service ImageFsInfo it logs a warning naming the
// endpoint and tries again with Backoff. It returns an error only when ctx
// ends or an endpoint cannot be parsed, never because the runtime is slow.
func Connect(ctx context.Context, runtimeEndpoint, imageEndpoint string, requestTimeout time.Duration, log *slog.Logger, opts ...Option) (*Services, error) {
	o := options{attempt: DefaultAttemptTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if imageEndpoint == "" {
		imageEndpoint = runtimeEndpoint
	}
	rtConn, err := grpcclient.Dial(runtimeEndpoint)
	if err != nil {
		return nil, fmt.Errorf("runtime endpoint: %w", err)
	}
	defer rtConn.Close()
	imgConn := rtConn
	if imageEndpoint != runtimeEndpoint {
		if imgConn, err = grpcclient.Dial(imageEndpoint); err != nil {
			return nil, fmt.Errorf("image endpoint: %w", err)
		}
		defer imgConn.Close()
	}
	probeRuntime := runtimeapi.NewRuntimeServiceClient(rtConn)
	probeImages := runtimeapi.NewImageServiceClient(imgConn)

	svc := &Services{}
	delay := Backoff.DelayFunc()
	for {
		endpoint, err := connectOnce(ctx, svc, o.attempt, runtimeEndpoint, imageEndpoint, requestTimeout, probeRuntime, probeImages)
		if err == nil {
			log.Info("runtime connected", "runtime", svc.Version.RuntimeName, "version", svc.Version.RuntimeVersion,
				"endpoint", runtimeEndpoint, "imageEndpoint", imageEndpoint)
			return svc, nil
		}
		log.Warn("CRI endpoint not answering; retrying", "endpoint", endpoint, "err", err)
		select {
		case <-ctx.Done():
			if svc.Runtime != nil {
				_ = svc.Runtime.Close(context.Background())
			}
			return nil, fmt.Errorf("waiting for the runtime at %s: %w", endpoint, ctx.Err())
		case <-time.After(delay()):
		}
	}
}

// connectOnce makes one attempt: it asks each endpoint over the probe
// connections and makes the cri-client service of an endpoint that answered
// (kept in svc across attempts). It returns the endpoint that failed.
func connectOnce(ctx context.Context, svc *Services, attempt time.Duration, runtimeEndpoint, imageEndpoint string, requestTimeout time.Duration,
	probeRuntime runtimeapi.RuntimeServiceClient, probeImages runtimeapi.ImageServiceClient) (string, error) {
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	if svc.Runtime == nil {
		if _, err := probeRuntime.Version(actx, &runtimeapi.VersionRequest{}); err != nil {
			return runtimeEndpoint, err
		}
		// It answered a moment ago; this check fails only if it went away
		// since, which leaves cri-client's connection behind, once.
		rt, err := remote.NewRemoteRuntimeService(actx, runtimeEndpoint, requestTimeout, nil, false)
		if err != nil {
			return runtimeEndpoint, err
		}
		v, err := rt.Version(actx, "")
		if err != nil {
			_ = rt.Close(context.Background())
			return runtimeEndpoint, err
		}
		svc.Runtime, svc.Version = rt, v
	}
	if _, err := probeImages.ImageFsInfo(actx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
		return imageEndpoint, err
	}
	img, err := remote.NewRemoteImageService(actx, imageEndpoint, requestTimeout, nil, false)
	if err != nil {
		return imageEndpoint, err
	}
	svc.Images = img
	return "", nil
}
