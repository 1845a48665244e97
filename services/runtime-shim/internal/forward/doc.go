// Package forward is the runtime-shim's forwarding backend: every CRI
// RuntimeService and ImageService method, unary and streaming, is relayed
// to another CRI endpoint (containerd, CRI-O, another runtime-shim).
//
// The handlers are built from the CRI's own service descriptors rather than
// written per method, so a method added to k8s.io/cri-api is forwarded as
// soon as the dependency is bumped. Errors from upstream keep their gRPC
// codes; the shared interceptor chain logs and counts each call, and the
// forwarder adds an upstream latency histogram per method and code.
//
//	f, _ := forward.New("unix:///run/containerd/containerd.sock", reg)
//	f.Register(grpcServer)
package forward
