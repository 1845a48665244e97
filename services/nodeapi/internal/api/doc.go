// Package api assembles the kubelet API's HTTP handler: the kubelet's paths
// (/healthz, /pods, /runningpods/, /configz, /containerLogs, /exec, /attach,
// /portForward, /run, /stats/summary, /metrics, /metrics/resource,
// /metrics/probes) routed to
// the handlers of the sibling packages, every request behind the
// authentication and authorization filter and counted in request metrics
// labelled as the kubelet labels its own (method, path bucket, server type,
// long-running).
//
//	h := api.New(api.Deps{NodeName: "n1", Pods: src, Runtime: rt, Auth: a.Filter, ...})
//	srv := &http.Server{Handler: h}
package api
