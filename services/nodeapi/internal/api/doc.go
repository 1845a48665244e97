// Package api assembles the kubelet API's HTTP handlers: the kubelet's paths
// (/healthz, /pods, /runningpods/, /configz, /containerLogs, /exec, /attach,
// /portForward, /run, /stats/summary, /metrics, /metrics/resource,
// /metrics/probes) routed to the handlers of the sibling packages. New is
// the HTTPS port's handler, every request behind the authentication and
// authorization filter; NewReadOnly the read-only port's (readOnlyPort),
// only the paths the kubelet serves there, without authentication. Both
// count requests in metrics labelled as the kubelet labels its own (method,
// path bucket, server type, long-running).
//
//	h := api.New(api.Deps{Pods: src, Runtime: rt, Auth: a.Filter, ...})
//	srv := &http.Server{Handler: h}
//	ro := &http.Server{Handler: api.NewReadOnly(deps)} // plain HTTP
package api
