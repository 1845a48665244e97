// Package upstream holds the tests that pin podsyncd's probes
// (services/podsyncd/internal/prober) to the kubelet's own probers in
// k8s.io/kubernetes v1.36.3 (pkg/probe/exec, http, tcp and grpc): each case
// runs both against the same server or runtime and compares the result and
// the message the kubelet puts in its Unhealthy and ProbeWarning events.
//
//	cd services/podsyncd/upstream && GOWORK=off go test -race ./...
package upstream
