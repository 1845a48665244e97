package simcri

import (
	"context"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Register registers the always-ready runtime and image services on s.
func Register(s *grpc.Server) {
	runtimeapi.RegisterRuntimeServiceServer(s, runtime{})
	runtimeapi.RegisterImageServiceServer(s, runtime{})
}

// runtime answers what nodestatusd reads of a runtime.
type runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
}

func (runtime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "simcri", RuntimeVersion: "1", RuntimeApiVersion: "v1"}, nil
}

func (runtime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

// ImageFsInfo answers k8s.io/cri-client's connection check of the image
// service.
func (runtime) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (runtime) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{}, nil
}
