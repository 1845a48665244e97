// Package bench compares statusd's syncer with upstream's status manager
// (k8s.io/kubernetes/pkg/kubelet/status) under the same workload, against
// the same real kube-apiserver, in the same run:
//
//	cd services/statusd/bench && STATUSD_BENCH=1 go test -run TestBench -v .
//
// 110 pods on one node; open-loop status changes at 1, 5, 20 and 100 per
// second, and flat out (closed loop: each pod's writer waits until its change
// is visible through a watch, then makes the next one); at the kubelet's
// default 50/100 QPS and unlimited. It prints synced changes per second, API
// requests and writes per change (from the apiserver's
// apiserver_request_total) and p50/p99 from SetPodStatus to the change seen
// through a watch, then the ratios.
package bench
