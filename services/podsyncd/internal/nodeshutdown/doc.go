// Package nodeshutdown is the kubelet's graceful node shutdown
// (GracefulNodeShutdown with GracefulNodeShutdownBasedOnPodPriority) for
// podsyncd: it holds a systemd-logind "delay" inhibitor lock for shutdown,
// and when logind announces PrepareForShutdown(true) it refuses new pods,
// has the node reported NotReady ("node is shutting down"), kills the
// running pods group by group, lowest priority first, each group within its
// grace period, marks them Failed (reason Terminated, a DisruptionTarget
// condition) and only then releases the lock so the shutdown goes on.
//
//	cfg := nodeshutdown.Config{GracePeriod: 30 * time.Second, GracePeriodCriticalPods: 10 * time.Second}
//	if errs := cfg.Validate(); len(errs) > 0 { ... }      // field errors by config key
//	m := nodeshutdown.New(cfg, log, nodeshutdown.WithReadyErrors(report))
//	go m.Run(ctx, pods)                                    // no system bus: one log line, retried with backoff
//	if ok, reason, msg := m.Admit(); !ok { reject(pod, reason, msg) }
//
// Logind is reached over D-Bus (github.com/godbus/dbus/v5): the Logind type
// is the client, as the kubelet's nodeshutdown/systemd package is.
package nodeshutdown
