package docker

import (
	"context"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/prometheus/procfs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"
)

// How the stats calls use Docker.
//
// Docker 20.10 samples a container's usage in a collector that, while
// anyone subscribes, collects every subscribed container and then sleeps a
// second; a one-shot stats call (stream=false&one-shot=true, what the moby
// client sends unless asked for a previous sample) subscribes and returns
// the collector's next sample. Asked one after another, each call waits
// for the next tick: about a second per container. Asked together, all
// are answered by the same tick. So the list calls ask for every
// container at once, up to statsConcurrency in flight; a scrape of n
// running containers costs about ceil(n/statsConcurrency) ticks.
const (
	// statsConcurrency bounds the Docker stats calls in flight per shim.
	// Each is a connection and a goroutine in dockerd; `docker stats`
	// itself subscribes to every container at once, so 64 is modest.
	statsConcurrency = 64
	// sampleFresh is how long a container's sample is reused for other
	// callers (overlapping scrapes, ListPodSandboxStats then
	// ListContainerStats): Docker's own samples are a second apart, and a
	// reused sample keeps Docker's read time, so a client computing a CPU
	// rate from two samples is never misled.
	sampleFresh = 2 * time.Second
	// layerConcurrency bounds the size computations (inspect with
	// size=true walks the container's writable layer) in flight.
	layerConcurrency = 8
	// layerFresh is how long a writable layer's usage is reused; an older
	// one is still answered at once while Docker measures it again in the
	// background (containerd refreshes its snapshot usage every 10 s too).
	layerFresh = 10 * time.Second
	// fetchTimeout bounds one Docker call made for the stats caches.
	fetchTimeout = 30 * time.Second
	// inspectConcurrency bounds the sandbox inspects of a ListPodSandboxStats.
	inspectConcurrency = 16
)

// statsState is a Backend's stats machinery. It lives beside the Backend
// (created on first use, one per Backend) because the Backend's own fields
// are declared with its constructor in docker.go.
type statsState struct {
	samples  *keyedCache[*container.StatsResponse]
	layers   *keyedCache[layerUsage]
	inspects chan struct{}
	// procRoot and cgroupRoot are the host's /proc and cgroup mount: the
	// shim runs on Docker's host (like the resolv.conf rewrite, see dns.go).
	procRoot, cgroupRoot string

	memTotal uint64 // the host's memory; 0 unknown

	mu      sync.Mutex
	rootDir string // Docker's root dir, once learnt
}

func nowNano() int64 { return time.Now().UnixNano() }

// stats is the backend's stats state, made on first use.
func (b *Backend) stats() *statsState {
	b.statsOnce.Do(func() {
		if b.statsState == nil { // tests may set their own first
			b.statsState = b.newStatsState(clock.RealClock{}, "/proc", "/sys/fs/cgroup")
		}
	})
	return b.statsState
}

func (b *Backend) newStatsState(clk clock.PassiveClock, procRoot, cgroupRoot string) *statsState {
	s := &statsState{inspects: make(chan struct{}, inspectConcurrency), procRoot: procRoot, cgroupRoot: cgroupRoot}
	s.samples = newKeyedCache(statsConcurrency, sampleFresh, fetchTimeout, false, clk, b.oneShotStats)
	s.layers = newKeyedCache(layerConcurrency, layerFresh, fetchTimeout, true, clk, b.layerUsage)
	if fs, err := procfs.NewFS(procRoot); err == nil {
		if mi, err := fs.Meminfo(); err == nil && mi.MemTotalBytes != nil {
			s.memTotal = *mi.MemTotalBytes
		}
	}
	return s
}

// dockerRootDir is Docker's root dir, the file system holding the
// writable layers (as ImageFsInfo reports it); asked once, by one caller
// while the others wait.
func (b *Backend) dockerRootDir(ctx context.Context) string {
	st := b.stats()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.rootDir == "" {
		if info, err := b.cli.Info(ctx, client.InfoOptions{}); err == nil {
			st.rootDir = info.Info.DockerRootDir
		}
	}
	return st.rootDir
}

// oneShotStats reads one stats sample of a container from Docker.
func (b *Backend) oneShotStats(ctx context.Context, id string) (*container.StatsResponse, error) {
	res, err := b.cli.ContainerStats(ctx, id, client.ContainerStatsOptions{Stream: false})
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		return nil, err
	}
	return &s, nil
}

// layerUsage is a container's writable layer usage.
type layerUsage struct {
	at     time.Time
	bytes  uint64
	inodes *uint64 // nil: the layer's directory is not visible here
}

// layerUsage measures a container's writable layer: its size as Docker
// computes it (SizeRw) and, when the storage driver names the layer's
// directory and it is visible here, the inodes in it.
func (b *Backend) layerUsage(ctx context.Context, id string) (layerUsage, error) {
	ins, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{Size: true})
	if err != nil {
		return layerUsage{}, err
	}
	u := layerUsage{at: time.Now()}
	if sz := ins.Container.SizeRw; sz != nil && *sz > 0 {
		u.bytes = uint64(*sz)
	}
	if gd := ins.Container.GraphDriver; gd != nil && gd.Data["UpperDir"] != "" {
		if n, err := countInodes(gd.Data["UpperDir"]); err == nil {
			u.inodes = &n
		}
	}
	return u, nil
}

// countInodes counts the distinct inodes under dir, itself included.
func countInodes(dir string) (uint64, error) {
	var n uint64
	seen := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			if info, err := d.Info(); err == nil {
				if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
					if seen[st.Ino] {
						return nil
					}
					seen[st.Ino] = true
				}
			}
		}
		n++
		return nil
	})
	return n, err
}

// pick returns the first of keys present in a memory.stat map: cgroup v1
// names first ("total_" ones count the whole hierarchy), then v2's.
func pick(m map[string]uint64, keys ...string) (uint64, bool) {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v, true
		}
	}
	return 0, false
}

// criUsage turns Docker's sample into the CRI's CPU, memory and swap
// usage, stamped with the time Docker read it. A sample without a read
// time (the container stopped before Docker's collector reached it) gives
// none.
func criUsage(s *container.StatsResponse, memTotal uint64) (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage, *runtimeapi.SwapUsage) {
	if s == nil || s.Read.IsZero() {
		return nil, nil, nil
	}
	ts := s.Read.UnixNano()
	cpu := &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: s.CPUStats.CPUUsage.TotalUsage}}
	st := s.MemoryStats.Stats
	usage := s.MemoryStats.Usage
	inactive, _ := pick(st, "total_inactive_file", "inactive_file")
	// The working set leaves out inactive page cache, as cAdvisor
	// computes it; RSS is anonymous memory: v1's rss, v2's anon.
	ws := subFloor(usage, inactive)
	rss, _ := pick(st, "total_rss", "rss", "anon")
	pf, _ := pick(st, "total_pgfault", "pgfault")
	mpf, _ := pick(st, "total_pgmajfault", "pgmajfault")
	mem := &runtimeapi.MemoryUsage{
		Timestamp:       ts,
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws},
		UsageBytes:      &runtimeapi.UInt64Value{Value: usage},
		RssBytes:        &runtimeapi.UInt64Value{Value: rss},
		PageFaults:      &runtimeapi.UInt64Value{Value: pf},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: mpf},
	}
	// Docker reports the host's memory as the limit of an unlimited
	// container; only a real limit leaves memory "available".
	if l := s.MemoryStats.Limit; l > 0 && memTotal > 0 && l < memTotal {
		mem.AvailableBytes = &runtimeapi.UInt64Value{Value: subFloor(l, ws)}
	}
	var swap *runtimeapi.SwapUsage
	// Docker passes swap on only from cgroup v1 with swap accounting.
	if v, ok := pick(st, "total_swap", "swap"); ok {
		swap = &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: &runtimeapi.UInt64Value{Value: v}}
	}
	return cpu, mem, swap
}

// containerSample is one container's CRI stats with the process count
// Docker gave (for a pod without a cgroup of its own).
type containerSample struct {
	stats *runtimeapi.ContainerStats
	pids  uint64
}

// containerStats samples one container: CPU and memory from Docker's
// stats when it runs (a container that does not run has no sample, as in
// containerd), the writable layer always.
func (b *Backend) containerStats(ctx context.Context, c *runtimeapi.Container) (containerSample, error) {
	st := b.stats()
	out := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{Id: c.Id, Metadata: c.Metadata, Labels: c.Labels, Annotations: c.Annotations},
	}
	var (
		wg      sync.WaitGroup
		sample  *container.StatsResponse
		sErr    error
		layer   layerUsage
		lErr    error
		rootDir string
	)
	if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
		wg.Go(func() { sample, sErr = st.samples.get(ctx, c.Id) })
	}
	wg.Go(func() { layer, lErr = st.layers.get(ctx, c.Id) })
	wg.Go(func() { rootDir = b.dockerRootDir(ctx) })
	wg.Wait()
	if sErr != nil {
		return containerSample{}, toStatus(sErr, "stats of %s", c.Id)
	}
	out.Cpu, out.Memory, out.Swap = criUsage(sample, st.memTotal)
	out.WritableLayer = &runtimeapi.FilesystemUsage{Timestamp: nowNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: rootDir}}
	switch {
	case lErr == nil:
		out.WritableLayer.Timestamp = layer.at.UnixNano()
		out.WritableLayer.UsedBytes = &runtimeapi.UInt64Value{Value: layer.bytes}
		if layer.inodes != nil {
			out.WritableLayer.InodesUsed = &runtimeapi.UInt64Value{Value: *layer.inodes}
		}
	case cerrdefs.IsNotFound(lErr):
		return containerSample{}, toStatus(lErr, "writable layer of %s", c.Id)
	default:
		// The CPU and memory sample is still worth answering; the layer's
		// usage is left unknown.
		b.log.Debug("writable layer usage unavailable", "container", c.Id, "err", lErr)
	}
	cs := containerSample{stats: out}
	if sample != nil {
		cs.pids = sample.PidsStats.Current
	}
	return cs, nil
}

// manyContainerStats samples the containers concurrently (the caches bound
// the Docker calls) and returns them in order, leaving out containers
// removed meanwhile; the first other error fails the whole call.
func (b *Backend) manyContainerStats(ctx context.Context, cs []*runtimeapi.Container) ([]containerSample, error) {
	res := make([]containerSample, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { res[i], errs[i] = b.containerStats(ctx, c) })
	}
	wg.Wait()
	out := make([]containerSample, 0, len(cs))
	for i := range cs {
		if errs[i] != nil {
			if isNotFound(errs[i]) {
				continue
			}
			return nil, errs[i]
		}
		out = append(out, res[i])
	}
	return out, nil
}

// ContainerStats returns one sample of the container's usage.
func (b *Backend) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	if _, err := b.inspectContainer(ctx, req.ContainerId); err != nil {
		return nil, err
	}
	cs, err := b.listContainers(ctx, &runtimeapi.ContainerFilter{Id: req.ContainerId})
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, notFound("container", req.ContainerId)
	}
	st, err := b.containerStats(ctx, cs[0])
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st.stats}, nil
}

// ListContainerStats returns samples of the filtered containers.
func (b *Backend) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f := req.GetFilter()
	cf := &runtimeapi.ContainerFilter{}
	if f != nil {
		cf.Id, cf.PodSandboxId, cf.LabelSelector = f.Id, f.PodSandboxId, f.LabelSelector
	}
	cs, err := b.listContainers(ctx, cf)
	if err != nil {
		return nil, err
	}
	samples, err := b.manyContainerStats(ctx, cs)
	if err != nil {
		return nil, err
	}
	out := make([]*runtimeapi.ContainerStats, 0, len(samples))
	for _, s := range samples {
		out = append(out, s.stats)
	}
	return &runtimeapi.ListContainerStatsResponse{Stats: out}, nil
}

// pauseInfo is what pod-level stats need of a sandbox's pause container.
type pauseInfo struct {
	pid          int
	cgroupParent string
	hostNetwork  bool
}

func (b *Backend) inspectPause(ctx context.Context, id string) (pauseInfo, error) {
	st := b.stats()
	select {
	case st.inspects <- struct{}{}:
		defer func() { <-st.inspects }()
	case <-ctx.Done():
		return pauseInfo{}, ctx.Err()
	}
	ins, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return pauseInfo{}, err
	}
	var pi pauseInfo
	if s := ins.Container.State; s != nil && s.Running {
		pi.pid = s.Pid
	}
	if hc := ins.Container.HostConfig; hc != nil {
		pi.cgroupParent = hc.CgroupParent
		pi.hostNetwork = hc.NetworkMode.IsHost()
	}
	return pi, nil
}

// podLevel is what the pod's own processes say: the pod's cgroup when it
// has one, else the pause container's cgroup, and its network.
type podLevel struct {
	pod     *cgroupSample // the pod's cgroup: the whole pod's usage
	pause   *cgroupSample // the pause container's, without a pod cgroup
	network *runtimeapi.NetworkUsage
}

// readPodLevel reads the pod-level counters through the pause process.
// The pod's cgroup is the parent of the pause container's when the
// sandbox was given a cgroup parent that holds only this pod's
// containers (see holdsOnly).
func (b *Backend) readPodLevel(pi pauseInfo, sandboxID string, cs []*runtimeapi.Container) podLevel {
	var pl podLevel
	if pi.pid <= 0 {
		return pl
	}
	st := b.stats()
	if ref, err := cgroupOf(st.procRoot, st.cgroupRoot, pi.pid); err == nil {
		if parent := ref.parent(); pi.cgroupParent != "" && !parent.isRoot() {
			ids := map[string]bool{sandboxID: true}
			for _, c := range cs {
				ids[c.Id] = true
			}
			if ok, err := parent.holdsOnly(ids); err == nil && ok {
				if s, err := readCgroup(parent); err == nil {
					pl.pod = &s
				} else {
					b.log.Debug("pod cgroup unreadable", "sandbox", sandboxID, "err", err)
				}
			}
		}
		if pl.pod == nil {
			if s, err := readCgroup(ref); err == nil {
				pl.pause = &s
			}
		}
	} else {
		b.log.Debug("sandbox cgroup unknown", "sandbox", sandboxID, "pid", pi.pid, "err", err)
	}
	if !pi.hostNetwork {
		if n, err := sandboxNetwork(st.procRoot, pi.pid); err == nil {
			pl.network = n
		} else {
			b.log.Debug("sandbox network unreadable", "sandbox", sandboxID, "pid", pi.pid, "err", err)
		}
	}
	return pl
}

// podStats samples a sandbox and its containers cs.
//
// The pod's CPU and memory come from the pod's cgroup when it has one,
// as the kubelet reads them: cumulative CPU there never drops when a
// container exits. Without one (no cgroup parent, which is how podsyncd
// runs pods today) they are the sum of the running containers' samples
// and the pause container's own cgroup. Exited containers add nothing —
// the kubelet's summing fallback does the same — so the sum's cumulative
// CPU goes down when a container exits, and a client must take a drop as
// a new counter (nodeapi's rate cache and the kubelet's both do).
func (b *Backend) podStats(ctx context.Context, p *runtimeapi.PodSandbox, cs []*runtimeapi.Container) (*runtimeapi.PodSandboxStats, error) {
	var (
		wg      sync.WaitGroup
		samples []containerSample
		cErr    error
		pi      pauseInfo
	)
	wg.Go(func() { samples, cErr = b.manyContainerStats(ctx, cs) })
	if p.State == runtimeapi.PodSandboxState_SANDBOX_READY {
		wg.Go(func() {
			var err error
			if pi, err = b.inspectPause(ctx, p.Id); err != nil {
				b.log.Debug("inspect sandbox for stats", "sandbox", p.Id, "err", err)
			}
		})
	}
	wg.Wait()
	if cErr != nil {
		return nil, cErr
	}
	// Read after the containers' samples, so the pod's counters (which
	// include theirs) are never behind them.
	pl := b.readPodLevel(pi, p.Id, cs)
	linux := &runtimeapi.LinuxPodSandboxStats{Network: pl.network}
	for _, s := range samples {
		linux.Containers = append(linux.Containers, s.stats)
	}
	if pl.pod != nil {
		linux.Cpu, linux.Memory = criCPUFromCgroup(*pl.pod), criMemoryFromCgroup(*pl.pod)
		if pl.pod.pids != nil {
			linux.Process = &runtimeapi.ProcessUsage{Timestamp: pl.pod.at.UnixNano(), ProcessCount: &runtimeapi.UInt64Value{Value: *pl.pod.pids}}
		}
	} else {
		linux.Cpu, linux.Memory, linux.Process = sumPod(samples, pl.pause)
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{Id: p.Id, Metadata: p.Metadata, Labels: p.Labels, Annotations: p.Annotations},
		Linux:      linux,
	}, nil
}

// sumPod adds up the containers' samples and the pause container's; the
// timestamp is the latest of theirs (now when there is none).
func sumPod(samples []containerSample, pause *cgroupSample) (*runtimeapi.CpuUsage, *runtimeapi.MemoryUsage, *runtimeapi.ProcessUsage) {
	var ts int64
	var cpu, ws, usage, rss, pf, mpf, pids uint64
	for _, s := range samples {
		c, m := s.stats.GetCpu(), s.stats.GetMemory()
		if c == nil || m == nil {
			continue
		}
		ts = max(ts, c.Timestamp, m.Timestamp)
		cpu += c.GetUsageCoreNanoSeconds().GetValue()
		ws += m.GetWorkingSetBytes().GetValue()
		usage += m.GetUsageBytes().GetValue()
		rss += m.GetRssBytes().GetValue()
		pf += m.GetPageFaults().GetValue()
		mpf += m.GetMajorPageFaults().GetValue()
		pids += s.pids
	}
	if pause != nil {
		ts = max(ts, pause.at.UnixNano())
		cpu += pause.cpuNanos
		ws += pause.workingSet
		usage += pause.usage
		rss += pause.rss
		pf += pause.pageFaults
		mpf += pause.majFaults
		if pause.pids != nil {
			pids += *pause.pids
		}
	}
	if ts == 0 {
		ts = nowNano()
	}
	return &runtimeapi.CpuUsage{Timestamp: ts, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpu}},
		&runtimeapi.MemoryUsage{
			Timestamp: ts, WorkingSetBytes: &runtimeapi.UInt64Value{Value: ws}, UsageBytes: &runtimeapi.UInt64Value{Value: usage},
			RssBytes: &runtimeapi.UInt64Value{Value: rss}, PageFaults: &runtimeapi.UInt64Value{Value: pf}, MajorPageFaults: &runtimeapi.UInt64Value{Value: mpf},
		},
		&runtimeapi.ProcessUsage{Timestamp: ts, ProcessCount: &runtimeapi.UInt64Value{Value: pids}}
}

// PodSandboxStats samples one sandbox and its containers.
func (b *Backend) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := b.inspectSandbox(ctx, req.PodSandboxId)
	if err != nil {
		return nil, err
	}
	cs, err := b.listContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: sb.ID})
	if err != nil {
		return nil, err
	}
	state := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	if sb.Ready {
		state = runtimeapi.PodSandboxState_SANDBOX_READY
	}
	st, err := b.podStats(ctx, &runtimeapi.PodSandbox{Id: sb.ID, Metadata: sb.metadata(), Labels: sb.Labels, Annotations: sb.Annotations, State: state}, cs)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: st}, nil
}

// ListPodSandboxStats samples every (filtered) sandbox, all at once: one
// listing of the containers, then every pod and container concurrently.
func (b *Backend) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	f := &runtimeapi.PodSandboxFilter{}
	if rf := req.GetFilter(); rf != nil {
		f.Id, f.LabelSelector = rf.Id, rf.LabelSelector
	}
	ps, err := b.listSandboxes(ctx, f)
	if err != nil {
		return nil, err
	}
	all, err := b.listContainers(ctx, &runtimeapi.ContainerFilter{})
	if err != nil {
		return nil, err
	}
	bySandbox := map[string][]*runtimeapi.Container{}
	for _, c := range all {
		bySandbox[c.PodSandboxId] = append(bySandbox[c.PodSandboxId], c)
	}
	res := make([]*runtimeapi.PodSandboxStats, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { res[i], errs[i] = b.podStats(ctx, p, bySandbox[p.Id]) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return &runtimeapi.ListPodSandboxStatsResponse{Stats: res}, nil
}
