// Package streams serves the kubelet API's /exec, /attach, /portForward and
// /run endpoints. It never speaks the stream protocols itself: it finds the
// container through the runtime, asks the CRI for a streaming URL (Exec,
// Attach, PortForward) and proxies the upgraded connection to the runtime's
// streaming server with k8s.io/apimachinery's upgrade-aware proxy, the way
// the kubelet does. WebSocket clients that speak the v5 stream-close protocol
// are translated to SPDY, and WebSocket-tunnelled port-forwards unwrapped,
// with k8s.io/apiserver's translators, as the kubelet does with its
// ExtendWebSocketsToKubelet feature (on by default in 1.36).
//
//	h := streams.New(podSource, runtimeService, streams.WithLogger(log))
//	mux.Handle("GET /exec/{namespace}/{pod}/{container}", h.Exec())
package streams
