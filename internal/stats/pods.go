package stats

import (
	"cmp"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// etcHostsFile is the pod's managed /etc/hosts in its pod dir, counted in
// the pod's ephemeral storage as the kubelet counts it.
const etcHostsFile = "etc-hosts"

// scrape is one Summary's view of the runtime.
type scrape struct {
	p    *Provider
	ctx  context.Context
	only bool
	now  time.Time
	// rootFs is the nodefs, the frame of logs and ephemeral storage.
	rootFs fsInfo
	// fsByMount memoises the statfs of writable layers' filesystems.
	fsByMount map[string]*fsInfo
}

// criView is what one round of CRI calls says: the sandboxes, the
// containers and their stats.
type criView struct {
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	// sbStats are the runtime's pod sandbox stats, or, for a runtime
	// without them, its container stats grouped by sandbox.
	sbStats []*runtimeapi.PodSandboxStats
}

// criRound is one round of CRI calls in flight, shared by every scrape
// that starts while it runs.
type criRound struct {
	done    chan struct{}
	view    criView
	err     error
	callers int // scrapes that joined, under roundMu
}

// criSnapshot returns the runtime's current view. A runtime's stats can
// be slow (runtime-shim asks Docker container by container), so scrapes
// that overlap (metrics-server, Prometheus and a /stats/summary client at
// once) share one round instead of each making its own. The round runs
// to completion for the others if its first caller gives up; each caller
// still returns when its own context ends.
func (p *Provider) criSnapshot(ctx context.Context) (criView, error) {
	p.roundMu.Lock()
	r := p.round
	if r == nil {
		r = &criRound{done: make(chan struct{})}
		p.round = r
		go func() {
			r.view, r.err = p.fetchCRI(context.WithoutCancel(ctx))
			p.roundMu.Lock()
			p.round = nil
			p.roundMu.Unlock()
			close(r.done)
		}()
	}
	r.callers++
	p.roundMu.Unlock()
	select {
	case <-r.done:
		return r.view, r.err
	case <-ctx.Done():
		return criView{}, ctx.Err()
	}
}

// fetchCRI lists sandboxes, containers and the pod sandbox stats
// together; for a runtime without ListPodSandboxStats it falls back to
// ListContainerStats, as the kubelet does.
func (p *Provider) fetchCRI(ctx context.Context) (criView, error) {
	var (
		wg                     sync.WaitGroup
		v                      criView
		sbErr, ctrErr, statErr error
	)
	wg.Go(func() { v.sandboxes, sbErr = p.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{}) })
	wg.Go(func() { v.containers, ctrErr = p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{}) })
	wg.Go(func() { v.sbStats, statErr = p.rt.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{}) })
	wg.Wait()
	switch {
	case sbErr != nil:
		return v, fmt.Errorf("failed to list all pod sandboxes: %w", sbErr)
	case ctrErr != nil:
		return v, fmt.Errorf("failed to list all containers: %w", ctrErr)
	case status.Code(statErr) == codes.Unimplemented:
		cs, err := p.rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{})
		if err != nil {
			return v, fmt.Errorf("failed to list all container stats: %w", err)
		}
		v.sbStats = groupContainerStats(cs, v.containers)
	case statErr != nil:
		return v, statErr
	}
	return v, nil
}

// podStats builds the pods' stats from the runtime's view.
func (p *Provider) podStats(ctx context.Context, only bool, now time.Time, rootFs fsInfo) ([]statsv1alpha1.PodStats, error) {
	v, err := p.criSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	sbMap := keepSandboxes(v.sandboxes)
	ctrMap := keepContainers(v.containers)
	s := &scrape{p: p, ctx: ctx, only: only, now: now, rootFs: rootFs, fsByMount: map[string]*fsInfo{}}
	out := make([]statsv1alpha1.PodStats, 0, len(v.sbStats))
	for _, st := range v.sbStats {
		if st == nil || st.GetAttributes() == nil {
			p.log.Debug("skipping pod sandbox stats without attributes")
			continue
		}
		sb, ok := sbMap[st.Attributes.Id]
		if !ok {
			continue // terminated, or created after the listing
		}
		ps, ok := s.pod(sb, st, ctrMap)
		if ok {
			out = append(out, ps)
		}
	}
	if !only {
		p.pids.retain(sbMap)
	}
	slices.SortFunc(out, func(a, b statsv1alpha1.PodStats) int {
		return cmp.Or(cmp.Compare(a.PodRef.Namespace, b.PodRef.Namespace), cmp.Compare(a.PodRef.Name, b.PodRef.Name),
			cmp.Compare(a.PodRef.UID, b.PodRef.UID))
	})
	return out, nil
}

// keepSandboxes applies the kubelet's rule for which sandboxes have stats:
// a pod (name and namespace) with one sandbox keeps it whatever its state;
// one with several keeps the ready ones, or, when none is ready, the
// latest.
func keepSandboxes(all []*runtimeapi.PodSandbox) map[string]*runtimeapi.PodSandbox {
	type ref struct{ name, namespace string }
	groups := map[ref][]*runtimeapi.PodSandbox{}
	for _, sb := range all {
		if sb == nil {
			continue
		}
		r := ref{podName(sb), podNamespace(sb)}
		groups[r] = append(groups[r], sb)
	}
	out := make(map[string]*runtimeapi.PodSandbox, len(all))
	for _, g := range groups {
		if len(g) == 1 {
			out[g[0].Id] = g[0]
			continue
		}
		ready := false
		for _, sb := range g {
			if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
				out[sb.Id], ready = sb, true
			}
		}
		if !ready {
			latest := slices.MaxFunc(g, func(a, b *runtimeapi.PodSandbox) int { return cmp.Compare(a.CreatedAt, b.CreatedAt) })
			out[latest.Id] = latest
		}
	}
	return out
}

// keepContainers keeps running containers only, as the kubelet does (an
// exited one's usage is not the pod's any more), and of several running
// attempts of one container in one sandbox the latest.
func keepContainers(all []*runtimeapi.Container) map[string]*runtimeapi.Container {
	type ref struct{ sandbox, name string }
	latest := map[ref]*runtimeapi.Container{}
	for _, c := range all {
		if c == nil || c.State != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		r := ref{c.PodSandboxId, containerName(c.GetMetadata(), c.GetLabels())}
		if prev, ok := latest[r]; !ok || c.CreatedAt > prev.CreatedAt {
			latest[r] = c
		}
	}
	out := make(map[string]*runtimeapi.Container, len(latest))
	for _, c := range latest {
		out[c.Id] = c
	}
	return out
}

// groupContainerStats builds per-sandbox stats holding only containers,
// from ListContainerStats, for runtimes without ListPodSandboxStats.
func groupContainerStats(cs []*runtimeapi.ContainerStats, containers []*runtimeapi.Container) []*runtimeapi.PodSandboxStats {
	ctrMap := make(map[string]*runtimeapi.Container, len(containers))
	for _, c := range containers {
		if c != nil {
			ctrMap[c.Id] = c
		}
	}
	bySandbox := map[string]*runtimeapi.PodSandboxStats{}
	var order []string
	for _, st := range cs {
		c, ok := ctrMap[st.GetAttributes().GetId()]
		if !ok {
			continue
		}
		g, ok := bySandbox[c.PodSandboxId]
		if !ok {
			g = &runtimeapi.PodSandboxStats{Attributes: &runtimeapi.PodSandboxAttributes{Id: c.PodSandboxId}, Linux: &runtimeapi.LinuxPodSandboxStats{}}
			bySandbox[c.PodSandboxId] = g
			order = append(order, c.PodSandboxId)
		}
		g.Linux.Containers = append(g.Linux.Containers, st)
	}
	out := make([]*runtimeapi.PodSandboxStats, 0, len(order))
	for _, id := range order {
		out = append(out, bySandbox[id])
	}
	return out
}

func podName(sb *runtimeapi.PodSandbox) string {
	return cmp.Or(sb.GetMetadata().GetName(), sb.GetLabels()[kubelettypes.KubernetesPodNameLabel])
}

func podNamespace(sb *runtimeapi.PodSandbox) string {
	return cmp.Or(sb.GetMetadata().GetNamespace(), sb.GetLabels()[kubelettypes.KubernetesPodNamespaceLabel])
}

func containerName(md *runtimeapi.ContainerMetadata, labels map[string]string) string {
	return cmp.Or(md.GetName(), labels[kubelettypes.KubernetesContainerNameLabel])
}

// pod builds one pod's stats; false when the sandbox names no pod.
func (s *scrape) pod(sb *runtimeapi.PodSandbox, st *runtimeapi.PodSandboxStats, ctrMap map[string]*runtimeapi.Container) (statsv1alpha1.PodStats, bool) {
	ps := statsv1alpha1.PodStats{
		PodRef: statsv1alpha1.PodReference{
			Name:      podName(sb),
			Namespace: podNamespace(sb),
			UID:       cmp.Or(sb.GetMetadata().GetUid(), sb.GetLabels()[kubelettypes.KubernetesPodUIDLabel]),
		},
		// The kubelet's pod start time is the sandbox's creation.
		StartTime:  metav1.NewTime(time.Unix(0, sb.CreatedAt)),
		Containers: []statsv1alpha1.ContainerStats{},
	}
	if ps.PodRef.Name == "" || ps.PodRef.Namespace == "" {
		s.p.log.Warn("skipping pod sandbox that names no pod", "sandbox", sb.Id)
		return ps, false
	}
	linux := st.GetLinux()
	for _, cst := range linux.GetContainers() {
		c, ok := ctrMap[cst.GetAttributes().GetId()]
		if !ok || c.PodSandboxId != sb.Id {
			continue
		}
		cs, ok := s.container(&ps, cst, c)
		if ok {
			ps.Containers = append(ps.Containers, cs)
		}
	}
	slices.SortFunc(ps.Containers, func(a, b statsv1alpha1.ContainerStats) int { return cmp.Compare(a.Name, b.Name) })

	ps.CPU = s.podCPU(sb.Id, linux.GetCpu(), ps.Containers)
	ps.Memory = s.podMemory(linux.GetMemory(), ps.Containers)
	ps.Swap = podSwap(ps.Containers)
	if s.only {
		return ps, true
	}
	if n := linux.GetNetwork(); n != nil {
		ps.Network = criNetwork(n, s.now)
	} else if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
		// A stopped sandbox has no process, hence no namespace to read.
		ps.Network = s.sandboxNetwork(sb.Id)
	}
	if pr := linux.GetProcess(); pr != nil && pr.ProcessCount != nil {
		ps.ProcessStats = &statsv1alpha1.ProcessStats{ProcessCount: ptr(pr.ProcessCount.Value)}
	}
	if io := linux.GetIo(); io != nil {
		ps.IO = &statsv1alpha1.IOStats{Time: s.ts(io.Timestamp), PSI: criPSI(io.Psi)}
	}
	s.storage(&ps)
	return ps, true
}

// ts turns a CRI timestamp into a Time; a runtime that leaves it zero
// gets the scrape's time rather than 1970.
func (s *scrape) ts(ns int64) metav1.Time {
	if ns == 0 {
		return metav1.NewTime(s.now)
	}
	return metav1.NewTime(time.Unix(0, ns))
}

func (s *scrape) tsNanos(ns int64) int64 {
	if ns == 0 {
		return s.now.UnixNano()
	}
	return ns
}

// container builds one container's stats; false for data too broken to
// name the container.
func (s *scrape) container(ps *statsv1alpha1.PodStats, st *runtimeapi.ContainerStats, c *runtimeapi.Container) (statsv1alpha1.ContainerStats, bool) {
	name := cmp.Or(st.GetAttributes().GetMetadata().GetName(), containerName(c.GetMetadata(), c.GetLabels()))
	if name == "" {
		s.p.log.Warn("skipping container stats that name no container", "container", c.Id, "pod", ps.PodRef.Namespace+"/"+ps.PodRef.Name)
		return statsv1alpha1.ContainerStats{}, false
	}
	cs := statsv1alpha1.ContainerStats{
		Name: name,
		// The kubelet's container start time is its creation.
		StartTime: metav1.NewTime(time.Unix(0, c.CreatedAt)),
	}
	// Missing CPU, memory and swap become zeros, as the kubelet reports a
	// container the runtime gave no numbers for.
	if cpu := st.Cpu; cpu != nil {
		cs.CPU = s.cpuStats("container/"+c.Id, cpu)
	} else {
		cs.CPU = &statsv1alpha1.CPUStats{Time: metav1.NewTime(s.now), UsageCoreNanoSeconds: ptr[uint64](0), UsageNanoCores: ptr[uint64](0)}
	}
	if m := st.Memory; m != nil {
		cs.Memory = s.memoryStats(m)
	} else {
		cs.Memory = &statsv1alpha1.MemoryStats{Time: metav1.NewTime(s.now), UsageBytes: ptr[uint64](0), WorkingSetBytes: ptr[uint64](0), RSSBytes: ptr[uint64](0)}
	}
	if sw := st.Swap; sw != nil {
		cs.Swap = &statsv1alpha1.SwapStats{Time: s.ts(sw.Timestamp), SwapUsageBytes: value(sw.SwapUsageBytes), SwapAvailableBytes: value(sw.SwapAvailableBytes)}
	} else {
		cs.Swap = &statsv1alpha1.SwapStats{Time: metav1.NewTime(s.now), SwapUsageBytes: ptr[uint64](0), SwapAvailableBytes: ptr[uint64](0)}
	}
	if s.only {
		return cs, true
	}
	cs.IO = &statsv1alpha1.IOStats{Time: metav1.NewTime(s.now)}
	if io := st.Io; io != nil {
		cs.IO = &statsv1alpha1.IOStats{Time: s.ts(io.Timestamp), PSI: criPSI(io.Psi)}
	}
	cs.Rootfs = s.writableLayer(st.WritableLayer)
	cs.Logs = s.containerLogs(ps.PodRef, name)
	return cs, true
}

// writableLayer is the container's rootfs: the runtime's usage of its
// writable layer in the frame of the filesystem holding it.
func (s *scrape) writableLayer(wl *runtimeapi.FilesystemUsage) *statsv1alpha1.FsStats {
	out := &statsv1alpha1.FsStats{}
	if wl == nil {
		return out
	}
	out.Time = s.ts(wl.Timestamp)
	out.UsedBytes = value(wl.UsedBytes)
	out.InodesUsed = value(wl.InodesUsed)
	if fi := s.fsOf(wl.GetFsId().GetMountpoint()); fi != nil {
		out.AvailableBytes, out.CapacityBytes = ptr(fi.available), ptr(fi.capacity)
		out.Inodes, out.InodesFree = ptr(fi.inodes), ptr(fi.inodesFree)
	}
	return out
}

// fsOf is the statfs of a runtime's mount point, once per scrape; nil
// when it is not visible from here (the runtime may see another mount
// namespace), which leaves capacity unset as the kubelet does.
func (s *scrape) fsOf(mountpoint string) *fsInfo {
	if mountpoint == "" {
		return nil
	}
	if fi, ok := s.fsByMount[mountpoint]; ok {
		return fi
	}
	var res *fsInfo
	if fi, err := statFS(mountpoint, s.now); err == nil {
		res = &fi
	} else {
		s.p.log.Debug("filesystem of writable layer unknown", "mountpoint", mountpoint, "err", err)
	}
	s.fsByMount[mountpoint] = res
	return res
}

// podLogDir is the pod's log directory, <root>/<namespace>_<name>_<uid>.
func (s *scrape) podLogDir(ref statsv1alpha1.PodReference) string {
	return filepath.Join(s.p.podLogsDir, ref.Namespace+"_"+ref.Name+"_"+ref.UID)
}

// containerLogs is the usage of the container's log files, in the nodefs
// frame; nil when its log directory cannot be read.
func (s *scrape) containerLogs(ref statsv1alpha1.PodReference, name string) *statsv1alpha1.FsStats {
	if !pathSafe(ref.Namespace) || !pathSafe(ref.Name) || !pathSafe(ref.UID) || !pathSafe(name) {
		return nil
	}
	dir := filepath.Join(s.podLogDir(ref), name)
	u, err := filesUsage(dir)
	if err != nil {
		s.p.log.Debug("container log stats unavailable", "dir", dir, "err", err)
		return nil
	}
	fs := s.rootFs.base()
	fs.UsedBytes, fs.InodesUsed = ptr(u.bytes), ptr(u.inodes)
	return fs
}

// cpuStats is a CRI CPU sample; usageNanoCores, when the runtime leaves
// it out, is computed from the previous sample kept under key.
func (s *scrape) cpuStats(key string, cpu *runtimeapi.CpuUsage) *statsv1alpha1.CPUStats {
	out := &statsv1alpha1.CPUStats{
		Time:                 s.ts(cpu.Timestamp),
		UsageCoreNanoSeconds: value(cpu.UsageCoreNanoSeconds),
		UsageNanoCores:       value(cpu.UsageNanoCores),
		PSI:                  criPSI(cpu.Psi),
	}
	if out.UsageNanoCores == nil && cpu.UsageCoreNanoSeconds != nil {
		out.UsageNanoCores = s.p.cpu.update(key, s.tsNanos(cpu.Timestamp), cpu.UsageCoreNanoSeconds.Value, s.now)
	}
	return out
}

// memoryStats is a CRI memory sample.
func (s *scrape) memoryStats(m *runtimeapi.MemoryUsage) *statsv1alpha1.MemoryStats {
	return &statsv1alpha1.MemoryStats{
		Time:            s.ts(m.Timestamp),
		AvailableBytes:  value(m.AvailableBytes),
		UsageBytes:      value(m.UsageBytes),
		WorkingSetBytes: value(m.WorkingSetBytes),
		RSSBytes:        value(m.RssBytes),
		PageFaults:      value(m.PageFaults),
		MajorPageFaults: value(m.MajorPageFaults),
		PSI:             criPSI(m.Psi),
	}
}

// sumContainers adds up one kind of the containers' stats: of picks it
// from a container (nil when it has none), add adds one container's into
// the sum (the latest time, summed counters). Nil when no container has it.
func sumContainers[T any](containers []statsv1alpha1.ContainerStats, of func(*statsv1alpha1.ContainerStats) *T, add func(sum, c *T)) *T {
	var sum *T
	for i := range containers {
		c := of(&containers[i])
		if c == nil {
			continue
		}
		if sum == nil {
			sum = new(T)
		}
		add(sum, c)
	}
	return sum
}

// podCPU is the pod's CPU from the runtime's pod-level sample, or the sum
// of its containers' when the runtime gives none.
func (s *scrape) podCPU(sandboxID string, cpu *runtimeapi.CpuUsage, containers []statsv1alpha1.ContainerStats) *statsv1alpha1.CPUStats {
	if cpu != nil {
		return s.cpuStats("pod/"+sandboxID, cpu)
	}
	return sumContainers(containers, func(c *statsv1alpha1.ContainerStats) *statsv1alpha1.CPUStats { return c.CPU },
		func(sum, c *statsv1alpha1.CPUStats) {
			sum.Time = later(sum.Time, c.Time)
			addUsage(&sum.UsageCoreNanoSeconds, c.UsageCoreNanoSeconds)
			addUsage(&sum.UsageNanoCores, c.UsageNanoCores)
		})
}

// podMemory is the pod's memory from the runtime's pod-level sample, with
// the counters the runtime leaves out (RSS, page faults) summed from the
// containers; all of it summed from the containers when the runtime gives
// no pod-level sample.
func (s *scrape) podMemory(m *runtimeapi.MemoryUsage, containers []statsv1alpha1.ContainerStats) *statsv1alpha1.MemoryStats {
	sum := sumContainers(containers, func(c *statsv1alpha1.ContainerStats) *statsv1alpha1.MemoryStats { return c.Memory },
		func(sum, c *statsv1alpha1.MemoryStats) {
			sum.Time = later(sum.Time, c.Time)
			addUsage(&sum.AvailableBytes, c.AvailableBytes)
			addUsage(&sum.UsageBytes, c.UsageBytes)
			addUsage(&sum.WorkingSetBytes, c.WorkingSetBytes)
			addUsage(&sum.RSSBytes, c.RSSBytes)
			addUsage(&sum.PageFaults, c.PageFaults)
			addUsage(&sum.MajorPageFaults, c.MajorPageFaults)
		})
	if m == nil {
		return sum
	}
	out := s.memoryStats(m)
	if sum != nil {
		out.RSSBytes = cmp.Or(out.RSSBytes, sum.RSSBytes)
		out.PageFaults = cmp.Or(out.PageFaults, sum.PageFaults)
		out.MajorPageFaults = cmp.Or(out.MajorPageFaults, sum.MajorPageFaults)
	}
	return out
}

// podSwap sums the containers' swap (zeros for what they leave out); the
// CRI has no pod-level swap.
func podSwap(containers []statsv1alpha1.ContainerStats) *statsv1alpha1.SwapStats {
	return sumContainers(containers, func(c *statsv1alpha1.ContainerStats) *statsv1alpha1.SwapStats { return c.Swap },
		func(sum, c *statsv1alpha1.SwapStats) {
			sum.Time = later(sum.Time, c.Time)
			sum.SwapUsageBytes = ptr(deref(sum.SwapUsageBytes) + deref(c.SwapUsageBytes))
			sum.SwapAvailableBytes = ptr(deref(sum.SwapAvailableBytes) + deref(c.SwapAvailableBytes))
		})
}

// storage fills the pod's volume stats and ephemeral storage: the sum of
// its containers' writable layers and logs, its disk-backed emptyDir and
// configMap volumes, its own log files and its etc-hosts, in the nodefs
// frame (the kubelet's calcEphemeralStorage).
func (s *scrape) storage(ps *statsv1alpha1.PodStats) {
	eph := s.rootFs.base()
	for _, c := range ps.Containers {
		if c.Rootfs == nil {
			continue
		}
		eph.Time = later(eph.Time, c.Rootfs.Time)
		addUsage(&eph.UsedBytes, c.Rootfs.UsedBytes)
		addUsage(&eph.InodesUsed, c.Rootfs.InodesUsed)
		if c.Logs != nil {
			eph.Time = later(eph.Time, c.Logs.Time)
			addUsage(&eph.UsedBytes, c.Logs.UsedBytes)
			addUsage(&eph.InodesUsed, c.Logs.InodesUsed)
		}
	}
	if !pathSafe(ps.PodRef.UID) {
		// The UID names directories below; one that is not a plain name
		// would point elsewhere.
		s.p.log.Warn("pod UID is not a plain name; volumes not measured", "pod", ps.PodRef.Namespace+"/"+ps.PodRef.Name, "uid", ps.PodRef.UID)
		ps.EphemeralStorage = eph
		return
	}
	podDir := filepath.Join(s.p.podsDir, ps.PodRef.UID)
	vols, err := podVolumes(podDir)
	if err != nil {
		s.p.log.Debug("pod volumes unreadable", "dir", podDir, "err", err)
	}
	var ephemeral, other []statsv1alpha1.VolumeStats
	for _, v := range vols {
		vs, onTmpfs, ok := s.volume(v)
		if !ok {
			continue
		}
		if v.ephemeral(onTmpfs) {
			ephemeral = append(ephemeral, vs)
			eph.Time = later(eph.Time, vs.Time)
			addUsage(&eph.UsedBytes, vs.UsedBytes)
			addUsage(&eph.InodesUsed, vs.InodesUsed)
		} else {
			other = append(other, vs)
		}
	}
	ps.VolumeStats = append(ephemeral, other...)
	// Files at the top of the pod's log dir, and its etc-hosts.
	if pathSafe(ps.PodRef.Namespace) && pathSafe(ps.PodRef.Name) {
		if u, err := filesUsage(s.podLogDir(ps.PodRef)); err == nil {
			addUsage(&eph.UsedBytes, &u.bytes)
			addUsage(&eph.InodesUsed, &u.inodes)
		}
	}

	if u, at, err := s.p.du.get(filepath.Join(podDir, etcHostsFile), s.now); err == nil {
		eph.Time = later(eph.Time, metav1.NewTime(at))
		addUsage(&eph.UsedBytes, &u.bytes)
		addUsage(&eph.InodesUsed, &u.inodes)
	}
	ps.EphemeralStorage = eph
}

// volume measures one volume: usage by walking it (kept for the volume
// stats period), the rest by statfs. onTmpfs says whether it is a
// memory-backed volume.
func (s *scrape) volume(v volume) (statsv1alpha1.VolumeStats, bool, bool) {
	fi, err := statFS(v.dir, s.now)
	if err != nil {
		s.p.log.Debug("volume stats unavailable", "volume", v.dir, "err", err)
		return statsv1alpha1.VolumeStats{}, false, false
	}
	u, at, err := s.p.du.get(v.dir, s.now)
	if err != nil {
		s.p.log.Debug("volume usage unavailable", "volume", v.dir, "err", err)
		return statsv1alpha1.VolumeStats{}, false, false
	}
	vs := statsv1alpha1.VolumeStats{
		Name: v.name,
		FsStats: statsv1alpha1.FsStats{
			Time:           metav1.NewTime(at),
			AvailableBytes: ptr(fi.available),
			CapacityBytes:  ptr(fi.capacity),
			UsedBytes:      ptr(u.bytes),
			Inodes:         ptr(fi.inodes),
			InodesFree:     ptr(fi.inodesFree),
			InodesUsed:     ptr(u.inodes),
		},
	}
	return vs, fi.tmpfs, true
}

func value(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	return ptr(v.Value)
}

func criPSI(p *runtimeapi.PsiStats) *statsv1alpha1.PSIStats {
	if p == nil {
		return nil
	}
	out := &statsv1alpha1.PSIStats{}
	if f := p.Full; f != nil {
		out.Full = statsv1alpha1.PSIData{Total: f.Total, Avg10: f.Avg10, Avg60: f.Avg60, Avg300: f.Avg300}
	}
	if sm := p.Some; sm != nil {
		out.Some = statsv1alpha1.PSIData{Total: sm.Total, Avg10: sm.Avg10, Avg60: sm.Avg60, Avg300: sm.Avg300}
	}
	return out
}

func criInterface(i *runtimeapi.NetworkInterfaceUsage) statsv1alpha1.InterfaceStats {
	return statsv1alpha1.InterfaceStats{
		Name: i.GetName(), RxBytes: value(i.GetRxBytes()), RxErrors: value(i.GetRxErrors()),
		TxBytes: value(i.GetTxBytes()), TxErrors: value(i.GetTxErrors()),
	}
}

func criNetwork(n *runtimeapi.NetworkUsage, now time.Time) *statsv1alpha1.NetworkStats {
	at := metav1.NewTime(now)
	if n.Timestamp != 0 {
		at = metav1.NewTime(time.Unix(0, n.Timestamp))
	}
	out := &statsv1alpha1.NetworkStats{Time: at, Interfaces: make([]statsv1alpha1.InterfaceStats, 0, len(n.Interfaces)+1)}
	// The CRI leaves the default interface out of its list; the kubelet's
	// summary (from cAdvisor) lists every interface, the default one too.
	if n.DefaultInterface != nil {
		out.InterfaceStats = criInterface(n.DefaultInterface)
		out.Interfaces = append(out.Interfaces, out.InterfaceStats)
	}
	for _, i := range n.Interfaces {
		out.Interfaces = append(out.Interfaces, criInterface(i))
	}
	return out
}

// pathSafe says whether a name from the runtime can be one element of a
// path: not empty, not . or .., no separator. The API server validates
// pod names and UIDs, but the CRI is another process's word.
func pathSafe(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}
