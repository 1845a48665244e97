// Package docker is the runtime-shim's Docker backend: the CRI v1
// RuntimeService and ImageService on the Docker Engine, the way dockershim
// and cri-dockerd do it.
//
// A pod sandbox is a pause container; the pod's containers join its network,
// IPC and PID namespaces as the CRI namespace options say. Every Docker object
// carries the labels in labels.go (including the instance label, so several
// shims or test runs can share one Docker without seeing each other's
// objects) and a deterministic name, which makes creates idempotent. Sandbox
// metadata is also checkpointed in the data dir (package checkpoint) so stop,
// remove and list keep working when Docker lost the pause container.
//
//	b, err := docker.New(ctx, docker.Options{DataDir: dir, Instance: "default"})
//	runtimeapi.RegisterRuntimeServiceServer(grpcServer, b)
//	runtimeapi.RegisterImageServiceServer(grpcServer, b)
package docker
