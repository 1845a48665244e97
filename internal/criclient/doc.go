// Package criclient connects k8s.io/cri-client's remote runtime and image
// services (the kubelet's own CRI client: its request timeouts, logging and
// error handling) to a CRI endpoint that may not answer yet.
//
// cri-client's constructors check the endpoint once, under their connection
// timeout, and on failure return an error while their gRPC connection stays
// open, reconnecting in the background. A caller that retried them in a loop
// would leave one such connection behind per attempt, and one that gave up
// would exit whenever the runtime was slow (runtime-shim restarting). Connect
// instead asks the endpoints itself over one connection each, warning with
// the endpoint and backing off (wait.Backoff) until both answer, and only
// then makes the two services, each once.
//
//	svc, err := criclient.Connect(ctx, "unix:///run/microlet/runtime.sock", "", 2*time.Minute, log)
//	if err != nil { return err } // ctx ended, or an endpoint is malformed
//	defer svc.Close()
//	sandboxes, err := svc.Runtime.ListPodSandbox(ctx, nil)
package criclient
