// Package benchvs measures microlet and the upstream kubelet side by side
// (issue #32): one control plane, one runtime (runtime-shim on the host's
// Docker), the two agents one after the other with the same pods, and
// docs/performance.md generated from the recorded run.
//
//	rec, err := benchvs.Run(ctx, benchvs.Options{Kubelet: kubeletBin,
//		Agents: []string{benchvs.Microlet, benchvs.Kubelet}, Batches: []int{10, 30, 100},
//		IdleWindow: time.Minute, SteadyPods: 110, SteadyWindow: 2 * time.Minute,
//		ChurnRate: 5, ChurnWindow: 2 * time.Minute, Results: "_output/benchvs"})
//	path, err := benchvs.Save("test/benchvs/runs", rec)
//	benchvs.WritePage(f, rec, path)
//
// For each agent Run measures, after a settling pause: an idle window (no
// pods), batches of pods created at once (creation to Running and Ready,
// deletion to the object gone, seen by a watch) and a steady-state window
// with SteadyPods pods Running, then a churn: ChurnRate pods created a
// second for ChurnWindow, each deleted once Running, measured until the
// last is gone (startup latency, the agent's cost, API requests per pod).
// A window samples the agent's processes (/proc: CPU time and PSS,
// runtime-shim apart) every 2 s and diffs the API server's
// apiserver_request_total and the CRI calls the agent's runtime-shim
// handled (its --metrics-addr, testenv.Metrics.CRICalls). A baseline window
// with no agent comes first: what the control plane and the benchmark's own
// scrapes add to every window. The benchmark's pod watch is closed during
// the idle and steady windows (the churn needs it).
//
// The statistics (Percentiles, Throughput, RequestCounts, PerMinute,
// PerPod, Elapsed, CPUSeconds) and the page (WriteTables, WritePage) are pure functions of
// their inputs; cmd/benchvs ties them to flags (make bench-vs-kubelet). No
// figure is asserted anywhere: the run reports, it does not judge.
package benchvs
