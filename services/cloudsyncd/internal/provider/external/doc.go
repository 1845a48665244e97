// Package external is the provider that calls a cloud-provider plug-in over
// microlet's own gRPC API (proto/microlet/cloudprovider/v1) on a unix socket.
// The plug-in is a separate process in any language; it may die and be
// replaced at any time, so the connection is re-established with backoff and
// the plug-in's identity is asked again after it was unreachable.
//
//	p, _ := external.New("unix:///run/microlet/cloudprovider.sock", "node-a", log)
//	md, err := p.InstanceMetadata(ctx)
package external
