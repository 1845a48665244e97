// Package logs serves the kubelet API's container log endpoint,
// GET /containerLogs/{namespace}/{pod}/{container}, with the kubelet's
// query parameters (follow, previous, tailLines or tail, sinceSeconds,
// sinceTime, timestamps, limitBytes, stream), status codes and messages.
// It picks the container instance from the pod's status, asks the CRI for
// its log path and lets k8s.io/cri-client/pkg/logs read the CRI-format file,
// following it across rotation until the container exits or the client
// goes away.
//
//	src := pods.NewSource(podconfigClient, statusdClient)
//	rt, _ := remote.NewRemoteRuntimeService(ctx, "unix:///run/microlet/runtime.sock", 2*time.Minute, nil, false)
//	mux := http.NewServeMux()
//	mux.Handle("GET /containerLogs/{namespace}/{pod}/{container}", logs.NewHandler(src, rt, logs.WithLogger(log)))
//
// Authentication and authorization (nodes/proxy) are the server's job, not
// this package's.
package logs
