// Package streaming runs the CRI streaming server (k8s.io/cri-streaming)
// for Exec, Attach and PortForward: the CRI calls answer a URL on this
// server, and the client (kubelet's API server proxy, crictl) speaks
// SPDY or WebSocket to it.
//
//	s, err := streaming.Start("127.0.0.1:0", runtime)
//	defer s.Close()
//	resp, err := s.GetExec(req) // resp.Url points at s
package streaming
