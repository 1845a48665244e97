package main

import (
	"context"
	"net"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// readyCRI is a CRI runtime that is always ready, so simulated nodes are
// Ready and the startup loop ends as it would on a healthy node.
type readyCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
}

func (readyCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "benchcri", RuntimeVersion: "1", RuntimeApiVersion: "v1"}, nil
}

func (readyCRI) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

// ImageFsInfo answers k8s.io/cri-client's connection check of the image
// service.
func (readyCRI) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (readyCRI) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{}, nil
}

func serveReadyCRI(path string) (func(), error) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, readyCRI{})
	runtimeapi.RegisterImageServiceServer(srv, readyCRI{})
	go func() { _ = srv.Serve(lis) }()
	return srv.Stop, nil
}
