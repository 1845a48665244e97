// Package supervisor is `microlet run`: it starts each microlet service as a
// child process in dependency order, waits for a service's gRPC health to say
// SERVING before starting the services that need it, restarts a crashed
// service with exponential backoff, prefixes every child's output line with
// its name, serves SupervisorService on <run-dir>/microlet.sock and, when its
// context ends, stops the services in reverse order.
//
//	cfg := supervisor.DefaultConfig()
//	cfg.RunDir = "/tmp/ml"
//	s, err := supervisor.New(cfg) // a *UsageError: bad value, missing binary
//	if err != nil { ... }
//	err = s.Run(ctx)              // blocks until ctx ends and every child exited
//
// A component whose endpoint is configured elsewhere than its default socket
// in the run directory (runtime_endpoint: unix:///run/containerd/containerd.sock)
// is external: it is not started, only waited for, and its endpoint is handed
// to every service.
package supervisor
