// Package procinfo reads what microlet needs from /proc through
// github.com/prometheus/procfs, once for every binary: a process's CPU time
// and memory (RSS, PSS from smaps_rollup, peak RSS) for the supervisor's
// `status -o wide`, `make footprint` and the benches, and the node's task
// limit and task count that nodestatusd's pressure and nodeapi's summary
// report.
//
//	u, err := procinfo.Of(pid)        // CPU seconds, RSS, PSS, peak RSS
//	fs, _ := procfs.NewFS("/proc")
//	limit, ok := procinfo.TaskLimit(fs) // min(pid_max, threads-max)
//	n, err := procinfo.TaskCount("/proc") // every task, threads included
//
// The one value procfs does not parse is loadavg's task count (its LoadAvg
// keeps only the three averages); TaskCount reads that field itself, as the
// kubelet's pidlimit package does.
package procinfo
