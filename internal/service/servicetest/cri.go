package servicetest

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ServeConnectOnlyCRI serves, on a unix socket at sock until the test ends,
// a CRI runtime and image service that answers what criclient.Connect asks
// (Version, ImageFsInfo) and the sync loop's and the stats' listings with
// nothing; every other call is Unimplemented. It stands in for the runtime
// where a test is about a service's own start-up or API, not the runtime.
func ServeConnectOnlyCRI(tb testing.TB, sock string) {
	tb.Helper()
	Serve(tb, sock, func(srv *grpc.Server) {
		runtimeapi.RegisterRuntimeServiceServer(srv, connectOnlyCRI{})
		runtimeapi.RegisterImageServiceServer(srv, connectOnlyCRI{})
	})
}

// connectOnlyCRI is ServeConnectOnlyCRI's runtime.
type connectOnlyCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
}

func (connectOnlyCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "connect-only", RuntimeVersion: "0", RuntimeApiVersion: "v1"}, nil
}

func (connectOnlyCRI) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (connectOnlyCRI) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

func (connectOnlyCRI) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	return &runtimeapi.ListContainersResponse{}, nil
}

func (connectOnlyCRI) ListPodSandboxStats(context.Context, *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	return &runtimeapi.ListPodSandboxStatsResponse{}, nil
}

// GetContainerEvents sends nothing until the client goes.
func (connectOnlyCRI) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream grpc.ServerStreamingServer[runtimeapi.ContainerEventResponse]) error {
	<-stream.Context().Done()
	return nil
}
