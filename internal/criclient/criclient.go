package criclient

import (
	"context"
	"errors"
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
	delay := Backoff.DelayFunc()
	for {
		svc, err := TryConnect(ctx, runtimeEndpoint, imageEndpoint, requestTimeout, o.attempt)
		if err == nil {
			log.Info("runtime connected", "runtime", svc.Version.RuntimeName, "version", svc.Version.RuntimeVersion,
				"endpoint", runtimeEndpoint, "imageEndpoint", imageEndpoint)
			return svc, nil
		}
		var ee *EndpointError
		if !errors.As(err, &ee) || ee.Malformed {
			return nil, err
		}
		log.Warn("CRI endpoint not answering; retrying", "endpoint", ee.Endpoint, "err", ee.Err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the runtime at %s: %w", ee.Endpoint, ctx.Err())
		case <-time.After(delay()):
		}
	}
}

// EndpointError is why one endpoint could not be used.
type EndpointError struct {
	// Role is "runtime" or "image": which of the two endpoints failed.
	Role string
	// Endpoint is the CRI endpoint that failed.
	Endpoint string
	// Malformed is set when the endpoint cannot be parsed, which no retry
	// fixes.
	Malformed bool
	// Err is the cause.
	Err error
}

func (e *EndpointError) Error() string {
	if e.Malformed {
		return fmt.Sprintf("%s endpoint %s: %v", e.Role, e.Endpoint, e.Err)
	}
	return fmt.Sprintf("%s endpoint %s not answering: %v", e.Role, e.Endpoint, e.Err)
}

func (e *EndpointError) Unwrap() error { return e.Err }

// TryConnect makes one attempt, bounded by attempt: it asks the runtime
// (Version) and the image endpoint ("" is the runtime's; ImageFsInfo) over
// short-lived connections of its own and, when both answered, makes
// cri-client's two services (request timeout as in Connect). On failure it
// returns an *EndpointError naming the endpoint and leaves no connection
// open, so a caller with its own schedule (nodestatusd reads the runtime
// only when a status is due) may call it again and again.
func TryConnect(ctx context.Context, runtimeEndpoint, imageEndpoint string, requestTimeout, attempt time.Duration) (*Services, error) {
	if imageEndpoint == "" {
		imageEndpoint = runtimeEndpoint
	}
	rtConn, err := grpcclient.Dial(runtimeEndpoint)
	if err != nil {
		return nil, &EndpointError{Role: "runtime", Endpoint: runtimeEndpoint, Malformed: true, Err: err}
	}
	defer rtConn.Close()
	imgConn := rtConn
	if imageEndpoint != runtimeEndpoint {
		if imgConn, err = grpcclient.Dial(imageEndpoint); err != nil {
			return nil, &EndpointError{Role: "image", Endpoint: imageEndpoint, Malformed: true, Err: err}
		}
		defer imgConn.Close()
	}
	actx, cancel := context.WithTimeout(ctx, attempt)
	defer cancel()
	if _, err := runtimeapi.NewRuntimeServiceClient(rtConn).Version(actx, &runtimeapi.VersionRequest{}); err != nil {
		return nil, &EndpointError{Role: "runtime", Endpoint: runtimeEndpoint, Err: err}
	}
	if _, err := runtimeapi.NewImageServiceClient(imgConn).ImageFsInfo(actx, &runtimeapi.ImageFsInfoRequest{}); err != nil {
		return nil, &EndpointError{Role: "image", Endpoint: imageEndpoint, Err: err}
	}
	// Both answered a moment ago; cri-client's own checks fail only if one
	// went away since, which leaves cri-client's connection behind, once.
	rt, err := remote.NewRemoteRuntimeService(actx, runtimeEndpoint, requestTimeout, nil, false)
	if err != nil {
		return nil, &EndpointError{Role: "runtime", Endpoint: runtimeEndpoint, Err: err}
	}
	v, err := rt.Version(actx, "")
	if err != nil {
		_ = rt.Close(context.Background())
		return nil, &EndpointError{Role: "runtime", Endpoint: runtimeEndpoint, Err: err}
	}
	img, err := remote.NewRemoteImageService(actx, imageEndpoint, requestTimeout, nil, false)
	if err != nil {
		_ = rt.Close(context.Background())
		return nil, &EndpointError{Role: "image", Endpoint: imageEndpoint, Err: err}
	}
	return &Services{Runtime: rt, Images: img, Version: v}, nil
}
