// Package bench measures the runtime-shim against the Docker Engine it
// wraps: p50/p99 latency of RunPodSandbox, CreateContainer, StartContainer,
// ContainerStatus and ListContainers through the shim's socket, next to the
// same Docker operations called directly (their ratio is the shim's
// overhead), and the wall time to start 30 one-container pods. It is a
// `go test -bench` that prints a table:
//
//	go test -run '^$' -bench . -benchtime 1x ./services/runtime-shim/internal/bench/
package bench
