// Package bench measures statusd's syncer against the real API server. The
// measurement is a test that runs only when asked:
//
//	STATUSD_BENCH=1 go test -run TestBench -v ./services/statusd/internal/bench/
//
// 110 pods on one node; status changes at 1, 5, 20 and 100 per second and
// flat out, at the kubelet's default 50/100 QPS and unlimited. It prints a
// table of synced changes per second, API requests and writes per change
// (from the API server's apiserver_request_total) and the p50/p99 time from
// SetPodStatus to the change seen through a watch.
package bench
