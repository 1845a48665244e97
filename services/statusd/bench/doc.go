// Package bench compares statusd's syncer with upstream's status manager
// (k8s.io/kubernetes/pkg/kubelet/status) under the same workload, against
// the same real kube-apiserver, in the same run:
//
//	cd services/statusd/bench && flock /tmp/microlet-bench.lock go test -run '^$' -bench StatusManagers -benchtime 800x .
//
// 110 pods on one node; open-loop status changes at 1, 5, 20, 100 and 500
// per second, and flat out (closed loop: each pod's writer waits until its
// change is visible through a watch, then makes the next one, so every
// change needs a write of its own); at the kubelet's default 50/100 QPS and
// unlimited. Unlimited and flat out adds a "raw" row: no status manager,
// one precomputed PATCH per change from 110 writers, the API server's own
// write ceiling on this machine.
//
// Per row it prints synced changes per second (a change counts once its
// value, or a later value of the same pod, is visible through the watch),
// API requests, writes and non-2xx answers per change (from the apiserver's
// apiserver_request_total), p50/p99 from the hand-over to visibility, the
// CPU time kube-apiserver and etcd spent per write (from /proc), this
// process's CPU per change and the load average at the start and end.
//
// BenchmarkStatusManagers has one sub-benchmark per row; each makes b.N
// changes (-benchtime 800x: 800 per row) and reports its numbers through
// b.ReportMetric as well. Knobs: MICROLET_BENCH_QPS (all, 50/100,
// unlimited), MICROLET_BENCH_RATES (e.g. "100,flat"), MICROLET_BENCH_WORKERS
// (statusd's sync workers), MICROLET_BENCH_PROFILE (a directory for CPU,
// mutex and block profiles of the statusd rows).
package bench
