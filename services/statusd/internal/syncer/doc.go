// Package syncer writes cached pod statuses to the API server, faster than
// the kubelet's single serial loop:
//
//   - the API copy comes from an informer of this node's pods; a live GET is
//     made only on a conflict, a UID mismatch or a periodic reconcile;
//   - each change becomes one strategic merge patch of pods/status carrying a
//     metadata.uid precondition, and a patch with nothing in it is not sent;
//   - a workqueue keyed by pod UID coalesces changes made before a pod is sent
//     and never hands one pod to two workers, so each pod's writes stay in
//     order while a pool of workers syncs different pods in parallel;
//   - errors are retried with per-pod exponential backoff, and a 429's
//     Retry-After is honoured;
//   - every 10 s statuses whose API copy differs are resent (needsReconcile),
//     and terminal, reclaimed pods with a deletion timestamp are deleted with
//     grace period 0 and a UID precondition.
//
// Static pods are written through their mirror pod (found by name, carrying the
// kubernetes.io/config.mirror annotation); until it exists they wait.
//
//	s := syncer.New(client, c, podInformer, syncer.WithWorkers(8))
//	go s.Run(ctx)
package syncer
