// Package prober runs a pod's liveness, readiness and startup probes, the
// way the kubelet's prober manager does: one worker per probe per running
// container instance, results held until a success or failure threshold is
// crossed.
//
//	m := prober.New(rt, log, onChange, prober.WithRecorder(rec), prober.WithMetrics(metrics))
//	m.Sync(pod, runtimeStatus)     // after every pod sync: start/stop workers
//	m.Ready(c, containerID)          // the container's Ready and the pod's Ready condition
//	m.LivenessFailed(c, containerID) // podruntime kills and restarts the container
//	m.Remove(pod.UID)              // when the pod is gone
package prober
