package criexec

import (
	"context"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RequestAllowance is added to a command's timeout for the call's deadline:
// the kubelet's --runtime-request-timeout default, which cri-client adds.
const RequestAllowance = 2 * time.Minute

// ExecSync runs cmd in the container with timeout (whole seconds, as the CRI
// carries it; 0 is none) under a deadline of timeout + RequestAllowance, or
// under ctx alone when timeout is 0, as cri-client's ExecSync.
func ExecSync(ctx context.Context, rt runtimeapi.RuntimeServiceClient, containerID string, cmd []string, timeout time.Duration) (*runtimeapi.ExecSyncResponse, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+RequestAllowance)
		defer cancel()
	}
	return rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: containerID, Cmd: cmd, Timeout: int64(timeout.Seconds())})
}
