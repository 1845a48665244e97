// Package podstatus holds the pure rules of the kubelet's status manager
// (upstream pkg/kubelet/status), with no I/O, so the cache, the syncer and the
// tests share one definition of them:
//
//	st, err := podstatus.Prepare(pod, cached, incoming, time.Now())  // versioning input
//	merged := podstatus.Merge(apiPod, apiPod.Status, st, couldRun)    // before a PATCH
//	if podstatus.NeedsReconcile(apiPod, st) { ... }                    // periodic resend
//
// The rules were re-derived from upstream's behaviour: conditions owned by the
// kubelet replace the API's, every other condition is kept; timestamps are
// truncated to RFC 3339 seconds; a terminated container may not run again
// unless the restart policy allows it.
package podstatus
