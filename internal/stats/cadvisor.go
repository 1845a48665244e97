package stats

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/procfs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The container series of cAdvisor's Prometheus collector that the
// kubelet serves at /metrics/cadvisor, with cAdvisor's names and the
// kubelet's labels (container, pod, namespace, id, image, name): what
// dashboards and the e2e_node ContainerMetrics spec read. Only running
// containers are reported, as cAdvisor reports only live cgroups.
var cadvisorLabels = []string{"container", "pod", "namespace", "id", "image", "name"}

func cadvisorDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, cadvisorLabels...), extra...), nil)
}

var (
	cadCPUUsage     = cadvisorDesc("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.", "cpu")
	cadCPUUser      = cadvisorDesc("container_cpu_user_seconds_total", "Cumulative user cpu time consumed in seconds.")
	cadCPUSystem    = cadvisorDesc("container_cpu_system_seconds_total", "Cumulative system cpu time consumed in seconds.")
	cadMemUsage     = cadvisorDesc("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed")
	cadMemMax       = cadvisorDesc("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes")
	cadMemWorking   = cadvisorDesc("container_memory_working_set_bytes", "Current working set in bytes.")
	cadMemCache     = cadvisorDesc("container_memory_cache", "Number of bytes of page cache memory.")
	cadMemRSS       = cadvisorDesc("container_memory_rss", "Size of RSS in bytes.")
	cadMemMapped    = cadvisorDesc("container_memory_mapped_file", "Size of memory mapped files in bytes.")
	cadMemSwap      = cadvisorDesc("container_memory_swap", "Container swap usage in bytes.")
	cadMemFailcnt   = cadvisorDesc("container_memory_failcnt", "Number of memory usage hits limits")
	cadMemFailures  = cadvisorDesc("container_memory_failures_total", "Cumulative count of memory allocation failures.", "failure_type", "scope")
	cadOOMEvents    = cadvisorDesc("container_oom_events_total", "Count of out of memory events observed for the container")
	cadCPUPeriod    = cadvisorDesc("container_spec_cpu_period", "CPU period of the container.")
	cadCPUQuota     = cadvisorDesc("container_spec_cpu_quota", "CPU quota of the container.")
	cadCPUShares    = cadvisorDesc("container_spec_cpu_shares", "CPU share of the container.")
	cadMemLimit     = cadvisorDesc("container_spec_memory_limit_bytes", "Memory limit for the container.")
	cadMemReserve   = cadvisorDesc("container_spec_memory_reservation_limit_bytes", "Memory reservation limit for the container.")
	cadSwapLimit    = cadvisorDesc("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.")
	cadProcesses    = cadvisorDesc("container_processes", "Number of processes running inside the container.")
	cadThreads      = cadvisorDesc("container_threads", "Number of threads running inside the container")
	cadThreadsMax   = cadvisorDesc("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero")
	cadFDs          = cadvisorDesc("container_file_descriptors", "Number of open file descriptors for the container.")
	cadSockets      = cadvisorDesc("container_sockets", "Number of open sockets for the container.")
	cadUlimits      = cadvisorDesc("container_ulimits_soft", "Soft ulimit values for the container root process. Unlimited if -1, except priority and nice", "ulimit")
	cadBlkio        = cadvisorDesc("container_blkio_device_usage_total", "Blkio Device bytes usage", "device", "major", "minor", "operation")
	cadFsReadBytes  = cadvisorDesc("container_fs_reads_bytes_total", "Cumulative count of bytes read", "device")
	cadFsWriteBytes = cadvisorDesc("container_fs_writes_bytes_total", "Cumulative count of bytes written", "device")
	cadFsReads      = cadvisorDesc("container_fs_reads_total", "Cumulative count of reads completed", "device")
	cadFsWrites     = cadvisorDesc("container_fs_writes_total", "Cumulative count of writes completed", "device")
	cadFsUsage      = cadvisorDesc("container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", "device")
	cadLastSeen     = cadvisorDesc("container_last_seen", "Last time a container was seen by the exporter")
	cadStartTime    = cadvisorDesc("container_start_time_seconds", "Start time of the container since unix epoch in seconds.")
)

// CadvisorMetricsHandler serves the kubelet's /metrics/cadvisor: per
// running container, CPU, memory, process, file descriptor, block I/O and
// writable layer series read from the container's cgroups (v1 or v2) and
// /proc, found through the container's process (the CRI's verbose
// ContainerStatus). Network series (cAdvisor's, on the POD container) are
// not served. The caller mounts it behind authentication and
// authorization (nodes/metrics), or on the read-only port.
func CadvisorMetricsHandler(p *Provider) http.Handler {
	return collectorHandler(promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError},
		func(ctx context.Context) prometheus.Collector { return cadvisorCollector{p: p, ctx: ctx} })
}

type cadvisorCollector struct {
	p   *Provider
	ctx context.Context
}

// Describe implements prometheus.Collector: unchecked, the series vary
// with what each cgroup version offers.
func (cadvisorCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c cadvisorCollector) Collect(ch chan<- prometheus.Metric) {
	v, err := c.p.criSnapshot(c.ctx)
	if err != nil {
		c.p.log.Error("cadvisor metrics: listing the runtime failed", "err", err)
		return
	}
	sandboxes := map[string]*runtimeapi.PodSandbox{}
	for _, sb := range v.sandboxes {
		sandboxes[sb.GetId()] = sb
	}
	writable := map[string]*runtimeapi.FilesystemUsage{}
	for _, st := range v.sbStats {
		for _, cs := range st.GetLinux().GetContainers() {
			writable[cs.GetAttributes().GetId()] = cs.GetWritableLayer()
		}
	}
	live := map[string]bool{}
	now := c.p.clock.Now()
	for _, ctr := range v.containers {
		sb := sandboxes[ctr.GetPodSandboxId()]
		if ctr.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || sb == nil || podName(sb) == "" {
			continue
		}
		live[ctr.GetId()] = true
		pid := c.p.containerPID(c.ctx, ctr.GetId())
		if pid <= 0 {
			continue
		}
		cg, err := readContainerCgroup(c.p.procRoot, c.p.cgroupRoot, pid)
		if err != nil {
			c.p.log.Debug("cadvisor metrics: container cgroup unreadable", "container", ctr.GetId(), "pid", pid, "err", err)
			continue
		}
		labels := []string{containerName(ctr.GetMetadata(), ctr.GetLabels()), podName(sb), podNamespace(sb),
			cg.id, ctr.GetImage().GetImage(), ctr.GetId()}
		e := emitter{ch: ch, labels: labels}
		cg.emit(e)
		c.p.processSeries(e, cg.procs)
		if wl := writable[ctr.GetId()]; wl != nil && wl.GetUsedBytes() != nil {
			e.gauge(cadFsUsage, float64(wl.GetUsedBytes().GetValue()), wl.GetFsId().GetMountpoint())
		}
		e.gauge(cadLastSeen, float64(now.Unix()))
		e.gauge(cadStartTime, float64(ctr.GetCreatedAt())/float64(time.Second))
	}
	c.p.cpids.retainIDs(live)
}

// emitter sends samples carrying one container's labels.
type emitter struct {
	ch     chan<- prometheus.Metric
	labels []string
}

func (e emitter) send(d *prometheus.Desc, vt prometheus.ValueType, v float64, extra ...string) {
	if m, err := prometheus.NewConstMetric(d, vt, v, append(append([]string{}, e.labels...), extra...)...); err == nil {
		e.ch <- m
	}
}

func (e emitter) gauge(d *prometheus.Desc, v float64, extra ...string) {
	e.send(d, prometheus.GaugeValue, v, extra...)
}

func (e emitter) counter(d *prometheus.Desc, v float64, extra ...string) {
	e.send(d, prometheus.CounterValue, v, extra...)
}

// containerPID is the container's process, learnt once from the runtime's
// verbose ContainerStatus (the same "pid" member as a sandbox's).
func (p *Provider) containerPID(ctx context.Context, id string) int {
	return p.cpids.get(p, id, func() (map[string]string, error) {
		resp, err := p.rt.ContainerStatus(ctx, id, true)
		return resp.GetInfo(), err
	})
}

// blkioDevice is one device's block I/O counters of a cgroup.
type blkioDevice struct {
	major, minor                         string
	readBytes, writeBytes, reads, writes uint64
	hasBytes, hasOps                     bool
}

// containerCgroup is one reading of a container's cgroup(s).
type containerCgroup struct {
	id    string // the cgroup's path, cAdvisor's "id"
	procs []int  // the processes in it
	// Values read; a series whose file is missing is left out.
	vals     map[*prometheus.Desc]float64
	failures map[[2]string]float64
	blkio    []blkioDevice
}

// unlimitedMem is above any real memory limit: both cgroup versions
// report "no limit" as a huge number (v1) or "max" (v2), which cAdvisor
// turns into 0 for the limit series.
const unlimitedMem = 1 << 62

func specMem(v uint64) float64 {
	if v >= unlimitedMem {
		return 0
	}
	return float64(v)
}

// readContainerCgroup reads the cgroup the process pid is in: the v1
// controllers' hierarchies when memory and cpuacct are mounted as v1, the
// unified hierarchy otherwise.
func readContainerCgroup(procRoot, cgroupRoot string, pid int) (*containerCgroup, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, err
	}
	pr, err := fs.Proc(pid)
	if err != nil {
		return nil, err
	}
	cgs, err := pr.Cgroups()
	if err != nil {
		return nil, err
	}
	v1 := map[string]string{}
	unified := ""
	for _, cg := range cgs {
		if cg.HierarchyID == 0 {
			unified = filepath.Join(cgroupRoot, cg.Path)
			continue
		}
		for _, ctrl := range cg.Controllers {
			dir := filepath.Join(cgroupRoot, strings.Join(cg.Controllers, ","), cg.Path)
			if _, err := os.Stat(dir); err != nil {
				dir = filepath.Join(cgroupRoot, ctrl, cg.Path)
			}
			v1[ctrl] = dir
			if ctrl == "memory" {
				unified = "" // v1 wins
			}
		}
	}
	out := &containerCgroup{vals: map[*prometheus.Desc]float64{}, failures: map[[2]string]float64{}}
	if mem, ok := v1["memory"]; ok && v1["cpuacct"] != "" {
		out.id = strings.TrimPrefix(mem, filepath.Join(cgroupRoot, "memory"))
		return out, out.readV1(v1)
	}
	if unified == "" {
		return nil, os.ErrNotExist
	}
	out.id = strings.TrimPrefix(unified, cgroupRoot)
	return out, out.readV2(unified)
}

func (c *containerCgroup) set(d *prometheus.Desc, path string, conv func(uint64) float64) {
	if v, err := readUint(path); err == nil {
		c.vals[d] = conv(v)
	}
}

func asFloat(v uint64) float64 { return float64(v) }

func (c *containerCgroup) readV1(dirs map[string]string) error {
	cpuacct, mem := dirs["cpuacct"], dirs["memory"]
	if _, err := readUint(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
		return err
	}
	c.set(cadCPUUsage, filepath.Join(cpuacct, "cpuacct.usage"), func(v uint64) float64 { return float64(v) / 1e9 })
	// cpuacct.stat counts USER_HZ ticks, 100 a second on Linux.
	if st, err := readFlatKeyed(filepath.Join(cpuacct, "cpuacct.stat")); err == nil {
		c.vals[cadCPUUser], c.vals[cadCPUSystem] = float64(st["user"])/100, float64(st["system"])/100
	}
	if cpu := dirs["cpu"]; cpu != "" {
		c.set(cadCPUPeriod, filepath.Join(cpu, "cpu.cfs_period_us"), asFloat)
		c.set(cadCPUShares, filepath.Join(cpu, "cpu.shares"), asFloat)
		if b, err := os.ReadFile(filepath.Join(cpu, "cpu.cfs_quota_us")); err == nil {
			if q, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil && q > 0 {
				c.vals[cadCPUQuota] = float64(q)
			}
		}
	}
	c.set(cadMemUsage, filepath.Join(mem, "memory.usage_in_bytes"), asFloat)
	c.set(cadMemMax, filepath.Join(mem, "memory.max_usage_in_bytes"), asFloat)
	c.set(cadMemFailcnt, filepath.Join(mem, "memory.failcnt"), asFloat)
	c.set(cadMemLimit, filepath.Join(mem, "memory.limit_in_bytes"), specMem)
	c.set(cadMemReserve, filepath.Join(mem, "memory.soft_limit_in_bytes"), specMem)
	c.set(cadSwapLimit, filepath.Join(mem, "memory.memsw.limit_in_bytes"), specMem)
	if st, err := readFlatKeyed(filepath.Join(mem, "memory.stat")); err == nil {
		c.vals[cadMemCache], c.vals[cadMemRSS] = float64(st["total_cache"]), float64(st["total_rss"])
		c.vals[cadMemMapped], c.vals[cadMemSwap] = float64(st["total_mapped_file"]), float64(st["total_swap"])
		if u, ok := c.vals[cadMemUsage]; ok {
			c.vals[cadMemWorking] = max(u-float64(st["total_inactive_file"]), 0)
		}
		c.failures[[2]string{"pgfault", "container"}] = float64(st["pgfault"])
		c.failures[[2]string{"pgmajfault", "container"}] = float64(st["pgmajfault"])
		c.failures[[2]string{"pgfault", "hierarchy"}] = float64(st["total_pgfault"])
		c.failures[[2]string{"pgmajfault", "hierarchy"}] = float64(st["total_pgmajfault"])
	}
	if oc, err := readFlatKeyed(filepath.Join(mem, "memory.oom_control")); err == nil {
		c.vals[cadOOMEvents] = float64(oc["oom_kill"])
	}
	c.readPids(dirs["pids"], dirs["cpu"])
	if blk := dirs["blkio"]; blk != "" {
		c.blkio = readBlkioV1(filepath.Join(blk, "blkio.throttle.io_service_bytes"), filepath.Join(blk, "blkio.throttle.io_serviced"))
	}
	return nil
}

func (c *containerCgroup) readV2(dir string) error {
	st, err := readFlatKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return err
	}
	c.vals[cadCPUUsage] = float64(st["usage_usec"]) / 1e6
	c.vals[cadCPUUser], c.vals[cadCPUSystem] = float64(st["user_usec"])/1e6, float64(st["system_usec"])/1e6
	if b, err := os.ReadFile(filepath.Join(dir, "cpu.max")); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if p, err := strconv.ParseUint(f[1], 10, 64); err == nil {
				c.vals[cadCPUPeriod] = float64(p)
			}
			if q, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				c.vals[cadCPUQuota] = float64(q)
			}
		}
	}
	// cpu.weight back to shares, the inverse of the runtimes' conversion.
	c.set(cadCPUShares, filepath.Join(dir, "cpu.weight"), func(w uint64) float64 { return float64(2 + ((w-1)*262142)/9999) })
	c.set(cadMemUsage, filepath.Join(dir, "memory.current"), asFloat)
	c.set(cadMemMax, filepath.Join(dir, "memory.peak"), asFloat)
	c.vals[cadMemLimit], c.vals[cadMemReserve], c.vals[cadSwapLimit] = 0, 0, 0
	c.set(cadMemLimit, filepath.Join(dir, "memory.max"), specMem)
	c.set(cadMemReserve, filepath.Join(dir, "memory.low"), specMem)
	c.set(cadSwapLimit, filepath.Join(dir, "memory.swap.max"), specMem)
	if ms, err := readFlatKeyed(filepath.Join(dir, "memory.stat")); err == nil {
		c.vals[cadMemCache], c.vals[cadMemRSS] = float64(ms["file"]), float64(ms["anon"])
		c.vals[cadMemMapped] = float64(ms["file_mapped"])
		if u, ok := c.vals[cadMemUsage]; ok {
			c.vals[cadMemWorking] = max(u-float64(ms["inactive_file"]), 0)
		}
		for _, scope := range []string{"container", "hierarchy"} {
			c.failures[[2]string{"pgfault", scope}] = float64(ms["pgfault"])
			c.failures[[2]string{"pgmajfault", scope}] = float64(ms["pgmajfault"])
		}
	}
	c.set(cadMemSwap, filepath.Join(dir, "memory.swap.current"), asFloat)
	if ev, err := readFlatKeyed(filepath.Join(dir, "memory.events")); err == nil {
		c.vals[cadOOMEvents], c.vals[cadMemFailcnt] = float64(ev["oom_kill"]), float64(ev["max"])
	}
	c.readPids(dir, dir)
	c.blkio = readIOStatV2(filepath.Join(dir, "io.stat"))
	return nil
}

// readPids reads the process list (cgroup.procs of the cpu hierarchy on
// v1, which every runtime joins), the thread count (tasks or
// cgroup.threads) and pids.max.
func (c *containerCgroup) readPids(pidsDir, procsDir string) {
	if procsDir != "" {
		for _, l := range readLines(filepath.Join(procsDir, "cgroup.procs")) {
			if pid, err := strconv.Atoi(l); err == nil {
				c.procs = append(c.procs, pid)
			}
		}
		c.vals[cadProcesses] = float64(len(c.procs))
		threads := readLines(filepath.Join(procsDir, "tasks"))
		if threads == nil {
			threads = readLines(filepath.Join(procsDir, "cgroup.threads"))
		}
		c.vals[cadThreads] = float64(len(threads))
	}
	if pidsDir != "" {
		if b, err := os.ReadFile(filepath.Join(pidsDir, "pids.max")); err == nil {
			// "max" is no limit: 0, as cAdvisor reports it.
			n, _ := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
			c.vals[cadThreadsMax] = float64(n)
		}
	}
}

func readLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

// readBlkioV1 reads blkio.throttle.io_service_bytes and io_serviced:
// "major:minor Operation value" lines.
func readBlkioV1(bytesFile, opsFile string) []blkioDevice {
	devs := map[string]*blkioDevice{}
	var order []string
	parse := func(path string, set func(d *blkioDevice, op string, v uint64)) {
		f, err := os.Open(path)
		if err != nil {
			return
		}
		defer func() { _ = f.Close() }()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) != 3 {
				continue
			}
			major, minor, ok := strings.Cut(fields[0], ":")
			v, err := strconv.ParseUint(fields[2], 10, 64)
			if !ok || err != nil {
				continue
			}
			d := devs[fields[0]]
			if d == nil {
				d = &blkioDevice{major: major, minor: minor}
				devs[fields[0]] = d
				order = append(order, fields[0])
			}
			set(d, fields[1], v)
		}
	}
	parse(bytesFile, func(d *blkioDevice, op string, v uint64) {
		d.hasBytes = true
		switch op {
		case "Read":
			d.readBytes = v
		case "Write":
			d.writeBytes = v
		}
	})
	parse(opsFile, func(d *blkioDevice, op string, v uint64) {
		d.hasOps = true
		switch op {
		case "Read":
			d.reads = v
		case "Write":
			d.writes = v
		}
	})
	out := make([]blkioDevice, 0, len(order))
	for _, k := range order {
		out = append(out, *devs[k])
	}
	return out
}

// readIOStatV2 reads io.stat: "major:minor rbytes=N wbytes=N rios=N wios=N ..." lines.
func readIOStatV2(path string) []blkioDevice {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []blkioDevice
	for line := range strings.SplitSeq(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		major, minor, ok := strings.Cut(fields[0], ":")
		if !ok {
			continue
		}
		d := blkioDevice{major: major, minor: minor, hasBytes: true, hasOps: true}
		for _, kv := range fields[1:] {
			k, vs, _ := strings.Cut(kv, "=")
			v, _ := strconv.ParseUint(vs, 10, 64)
			switch k {
			case "rbytes":
				d.readBytes = v
			case "wbytes":
				d.writeBytes = v
			case "rios":
				d.reads = v
			case "wios":
				d.writes = v
			}
		}
		out = append(out, d)
	}
	return out
}

// deviceName is the block device's name under /dev, from sysfs, or
// "major:minor" when sysfs does not say.
func deviceName(major, minor string) string {
	b, err := os.ReadFile(filepath.Join("/sys/dev/block", major+":"+minor, "uevent"))
	if err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			if name, ok := strings.CutPrefix(l, "DEVNAME="); ok {
				return "/dev/" + name
			}
		}
	}
	return major + ":" + minor
}

func (c *containerCgroup) emit(e emitter) {
	counters := map[*prometheus.Desc]bool{cadCPUUser: true, cadCPUSystem: true, cadOOMEvents: true}
	for d, v := range c.vals {
		switch {
		case d == cadCPUUsage:
			e.counter(d, v, "total")
		case counters[d]:
			e.counter(d, v)
		default:
			e.gauge(d, v)
		}
	}
	for k, v := range c.failures {
		e.counter(cadMemFailures, v, k[0], k[1])
	}
	for _, d := range c.blkio {
		dev := deviceName(d.major, d.minor)
		if d.hasBytes {
			e.counter(cadBlkio, float64(d.readBytes), dev, d.major, d.minor, "Read")
			e.counter(cadBlkio, float64(d.writeBytes), dev, d.major, d.minor, "Write")
			e.counter(cadFsReadBytes, float64(d.readBytes), dev)
			e.counter(cadFsWriteBytes, float64(d.writeBytes), dev)
		}
		if d.hasOps {
			e.counter(cadFsReads, float64(d.reads), dev)
			e.counter(cadFsWrites, float64(d.writes), dev)
		}
	}
}

// processSeries counts the open file descriptors and sockets of the
// container's processes, and reports the first process's soft limit of
// open files, as cAdvisor's process metrics do.
func (p *Provider) processSeries(e emitter, pids []int) {
	fs, err := procfs.NewFS(p.procRoot)
	if err != nil {
		return
	}
	fds, sockets := 0, 0
	for i, pid := range pids {
		pr, err := fs.Proc(pid)
		if err != nil {
			continue
		}
		targets, err := pr.FileDescriptorTargets()
		if err != nil {
			continue
		}
		fds += len(targets)
		for _, t := range targets {
			if strings.HasPrefix(t, "socket:") {
				sockets++
			}
		}
		if i == 0 {
			if l, err := pr.Limits(); err == nil {
				e.gauge(cadUlimits, float64(l.OpenFiles), "max_open_files")
			}
		}
	}
	e.gauge(cadFDs, float64(fds))
	e.gauge(cadSockets, float64(sockets))
}
