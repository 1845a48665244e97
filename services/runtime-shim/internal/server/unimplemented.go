package server

import (
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// unimplementedRuntime answers every RuntimeService call with codes.Unimplemented until issue 8 lands.
type unimplementedRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
}

// unimplementedImage answers every ImageService call with codes.Unimplemented until issue 8 lands.
type unimplementedImage struct {
	runtimeapi.UnimplementedImageServiceServer
}
