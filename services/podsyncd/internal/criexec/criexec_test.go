package criexec

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recorder answers ExecSync and keeps the request and the call's deadline.
type recorder struct {
	runtimeapi.RuntimeServiceClient
	req      *runtimeapi.ExecSyncRequest
	deadline time.Time
	has      bool
}

func (r *recorder) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest, _ ...grpc.CallOption) (*runtimeapi.ExecSyncResponse, error) {
	r.req = req
	r.deadline, r.has = ctx.Deadline()
	return &runtimeapi.ExecSyncResponse{}, nil
}

// The CRI request carries the command's timeout; the call's deadline is
// that timeout plus the allowance, and none without a timeout.
func TestDeadlineIsTimeoutPlusAllowance(t *testing.T) {
	r := &recorder{}
	before := time.Now()
	if _, err := ExecSync(context.Background(), r, "c1", []string{"true"}, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if r.req.GetTimeout() != 3 || r.req.GetContainerId() != "c1" {
		t.Fatalf("request %v, want timeout 3 for c1", r.req)
	}
	if !r.has || r.deadline.Before(before.Add(3*time.Second+RequestAllowance)) {
		t.Fatalf("deadline %v (set %v), want at least %v", r.deadline, r.has, before.Add(3*time.Second+RequestAllowance))
	}
	if _, err := ExecSync(context.Background(), r, "c1", []string{"true"}, 0); err != nil {
		t.Fatal(err)
	}
	if r.has || r.req.GetTimeout() != 0 {
		t.Fatalf("without a timeout: deadline set %v, timeout %d", r.has, r.req.GetTimeout())
	}
}
