package criexec

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

// runtime answers Version and ExecSync on a real unix socket, keeping the
// last request and the deadline the call arrived with.
type runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu       sync.Mutex
	req      *runtimeapi.ExecSyncRequest
	deadline time.Time
	has      bool
	answer   func() (*runtimeapi.ExecSyncResponse, error)
}

func (r *runtime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "test", RuntimeVersion: "1", RuntimeApiVersion: "v1"}, nil
}

func (r *runtime) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.req = req
	r.deadline, r.has = ctx.Deadline()
	return r.answer()
}

// serve starts the runtime and returns cri-client's service on it with
// the given request timeout.
func serve(t *testing.T, r *runtime, requestTimeout time.Duration) Execer {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "rt.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	rt, err := remote.NewRemoteRuntimeService(context.Background(), "unix://"+sock, requestTimeout, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// Through cri-client: the CRI request carries the command's timeout, the
// call's deadline is that timeout plus the request timeout (none without a
// timeout), a non-zero exit is a Result and a runtime's DeadlineExceeded is
// cri-client's ErrCommandTimedOut.
func TestExecSyncThroughCRIClient(t *testing.T) {
	const requestTimeout = 40 * time.Second
	r := &runtime{answer: func() (*runtimeapi.ExecSyncResponse, error) {
		return &runtimeapi.ExecSyncResponse{ExitCode: 3, Stdout: []byte("out"), Stderr: []byte("err")}, nil
	}}
	rt := serve(t, r, requestTimeout)

	before := time.Now()
	res, err := ExecSync(context.Background(), rt, "c1", []string{"false"}, 3*time.Second)
	if err != nil {
		t.Fatalf("exit 3 is a result, got error %v", err)
	}
	if res.ExitCode != 3 || res.Output() != "outerr" {
		t.Fatalf("result %+v, want exit 3 with output outerr", res)
	}
	if r.req.GetTimeout() != 3 || r.req.GetContainerId() != "c1" {
		t.Fatalf("request %v, want timeout 3 for c1", r.req)
	}
	if !r.has || r.deadline.Before(before.Add(3*time.Second+requestTimeout)) {
		t.Fatalf("deadline %v (set %v), want at least %v", r.deadline, r.has, before.Add(3*time.Second+requestTimeout))
	}

	if _, err := ExecSync(context.Background(), rt, "c1", []string{"true"}, 0); err != nil {
		t.Fatal(err)
	}
	if r.has || r.req.GetTimeout() != 0 {
		t.Fatalf("without a timeout: deadline set %v, timeout %d", r.has, r.req.GetTimeout())
	}

	r.answer = func() (*runtimeapi.ExecSyncResponse, error) {
		return nil, status.Error(codes.DeadlineExceeded, "command timed out")
	}
	if _, err := ExecSync(context.Background(), rt, "c1", []string{"sleep", "9"}, time.Second); !errors.Is(err, remote.ErrCommandTimedOut) {
		t.Fatalf("runtime timed the command out: got %v, want ErrCommandTimedOut", err)
	}
	r.answer = func() (*runtimeapi.ExecSyncResponse, error) {
		return nil, status.Error(codes.NotFound, "no such container")
	}
	if _, err := ExecSync(context.Background(), rt, "c1", []string{"true"}, time.Second); status.Code(err) != codes.NotFound {
		t.Fatalf("runtime error: got %v, want NotFound kept", err)
	}
}
