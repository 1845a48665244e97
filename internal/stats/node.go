package stats

import (
	"fmt"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/microlet/microlet/internal/procinfo"
)

// nodeCPUKey is the rate cache's key of the root cgroup.
const nodeCPUKey = "node"

// defaultInterface is the interface a NetworkStats names at its top level,
// as the kubelet does.
const defaultInterface = "eth0"

// nodeStats reads the node's own numbers from the host.
func (p *Provider) nodeStats(onlyCPUAndMemory bool, now time.Time, rootFs fsInfo) (statsv1alpha1.NodeStats, error) {
	node := statsv1alpha1.NodeStats{NodeName: p.nodeName}
	proc, err := procfs.NewFS(p.procRoot)
	if err != nil {
		return node, fmt.Errorf("failed to get root cgroup stats: %w", err)
	}
	// meminfo gives the machine's memory capacity (what cAdvisor calls the
	// root container's limit) and swap; on cgroup v2 also the used memory.
	mi, miErr := proc.Meminfo()
	var cg rootCgroup
	if p.nodeCgroup == "" {
		cg, err = readRootCgroup(p.cgroupRoot, p.procRoot, mi, miErr)
	} else {
		cg, err = readNodeCgroup(p.cgroupRoot, p.nodeCgroup)
	}
	if err != nil {
		return node, fmt.Errorf("failed to get root cgroup stats: %w", err)
	}
	node.StartTime = metav1.NewTime(p.bootTime(proc))
	t := metav1.NewTime(now)

	node.CPU = &statsv1alpha1.CPUStats{
		Time:                 t,
		UsageCoreNanoSeconds: ptr(cg.cpuNanos),
		UsageNanoCores:       p.cpu.update(nodeCPUKey, now.UnixNano(), cg.cpuNanos, now),
		PSI:                  pressure(proc, "cpu"),
	}
	ws := cg.workingSet()
	node.Memory = &statsv1alpha1.MemoryStats{
		Time:            t,
		UsageBytes:      ptr(cg.usage),
		WorkingSetBytes: ptr(ws),
		RSSBytes:        ptr(cg.rss),
		PSI:             pressure(proc, "memory"),
	}
	if cg.faults {
		node.Memory.PageFaults, node.Memory.MajorPageFaults = ptr(cg.pgfault), ptr(cg.pgmajfault)
	}
	if miErr == nil && mi.MemTotalBytes != nil {
		// The kubelet's memory.available signal: capacity less working
		// set; a node cgroup's limit caps the capacity.
		capacity := *mi.MemTotalBytes
		if cg.limit > 0 && cg.limit < capacity {
			capacity = cg.limit
		}
		if capacity >= ws {
			node.Memory.AvailableBytes = ptr(capacity - ws)
		}
	}
	if miErr == nil && mi.SwapTotalBytes != nil && mi.SwapFreeBytes != nil && *mi.SwapFreeBytes <= *mi.SwapTotalBytes {
		node.Swap = &statsv1alpha1.SwapStats{
			Time:               t,
			SwapUsageBytes:     ptr(*mi.SwapTotalBytes - *mi.SwapFreeBytes),
			SwapAvailableBytes: ptr(*mi.SwapFreeBytes),
		}
	}
	if onlyCPUAndMemory {
		return node, nil
	}

	if psi := pressure(proc, "io"); psi != nil {
		node.IO = &statsv1alpha1.IOStats{Time: t, PSI: psi}
	}
	if nd, err := hostNetDev(proc); err == nil {
		node.Network = networkStats(nd, now)
	} else {
		p.log.Debug("node network stats unavailable", "err", err)
	}
	node.Fs = rootFs.whole()
	node.Rlimit = p.rlimit(proc, now)
	return node, nil
}

// hostNetDev reads the interfaces of the host's network namespace: that of
// PID 1, as cAdvisor reads it for the root container, so the numbers are
// the host's even when nodeapi runs in a network namespace of its own. It
// falls back to our own namespace when PID 1's is not readable.
func hostNetDev(proc procfs.FS) (procfs.NetDev, error) {
	if init, err := proc.Proc(1); err == nil {
		if nd, err := init.NetDev(); err == nil {
			return nd, nil
		}
	}
	return proc.NetDev()
}

// ignoredInterfacePrefixes are left out of network stats as cAdvisor
// leaves them out: loopback and the host ends of container links and
// bridges, which would count pod traffic twice.
var ignoredInterfacePrefixes = []string{"lo", "veth", "docker", "nerdctl"}

func ignoredInterface(name string) bool {
	n := strings.ToLower(name)
	for _, p := range ignoredInterfacePrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// networkStats turns a net/dev reading into the Summary's NetworkStats:
// every interface but the ignored ones, eth0 also at the top level.
func networkStats(nd procfs.NetDev, at time.Time) *statsv1alpha1.NetworkStats {
	names := make([]string, 0, len(nd))
	for n := range nd {
		if !ignoredInterface(n) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	ns := &statsv1alpha1.NetworkStats{Time: metav1.NewTime(at), Interfaces: make([]statsv1alpha1.InterfaceStats, 0, len(names))}
	for _, n := range names {
		l := nd[n]
		is := statsv1alpha1.InterfaceStats{
			Name:     n,
			RxBytes:  ptr(l.RxBytes),
			RxErrors: ptr(l.RxErrors),
			TxBytes:  ptr(l.TxBytes),
			TxErrors: ptr(l.TxErrors),
		}
		if n == defaultInterface {
			ns.InterfaceStats = is
		}
		ns.Interfaces = append(ns.Interfaces, is)
	}
	return ns
}

// pressure reads the system-wide pressure stall information of resource
// (cpu, memory, io), which is the root cgroup's; nil when the kernel has
// none.
func pressure(proc procfs.FS, resource string) *statsv1alpha1.PSIStats {
	st, err := proc.PSIStatsForResource(resource)
	if err != nil {
		return nil
	}
	out := &statsv1alpha1.PSIStats{}
	if st.Some != nil {
		out.Some = psiData(st.Some)
	}
	if st.Full != nil {
		out.Full = psiData(st.Full)
	}
	return out
}

func psiData(l *procfs.PSILine) statsv1alpha1.PSIData {
	return statsv1alpha1.PSIData{Total: l.Total, Avg10: l.Avg10, Avg60: l.Avg60, Avg300: l.Avg300}
}

// rlimit reports the system-wide task limit (the smaller of pid_max and
// threads-max) and the number of tasks, as the kubelet does.
func (p *Provider) rlimit(proc procfs.FS, now time.Time) *statsv1alpha1.RlimitStats {
	r := &statsv1alpha1.RlimitStats{Time: metav1.NewTime(now)}
	if limit, ok := procinfo.TaskLimit(proc); ok {
		r.MaxPID = ptr(limit)
	}
	// loadavg counts every task; sysinfo(2)'s count is 16 bits wide, so it
	// is only the fallback, and only for the host's own proc.
	if n, err := procinfo.TaskCount(p.procRoot); err == nil {
		r.NumOfRunningProcesses = ptr(n)
	}
	if r.NumOfRunningProcesses == nil && p.procRoot == DefaultProcRoot {
		var si syscall.Sysinfo_t
		if syscall.Sysinfo(&si) == nil {
			r.NumOfRunningProcesses = ptr(int64(si.Procs))
		}
	}
	return r
}
