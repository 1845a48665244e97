package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// Defaults of the Provider's settings.
const (
	// DefaultRootDir is the node's data dir (the services' --data-dir):
	// its filesystem is the nodefs, as the kubelet's root dir is.
	DefaultRootDir = "/var/lib/microlet"
	// DefaultPodLogsDir is where container logs live,
	// <dir>/<namespace>_<name>_<uid>/<container>/<restart>.log.
	DefaultPodLogsDir = "/var/log/pods"
	// DefaultProcRoot is where proc is mounted.
	DefaultProcRoot = "/proc"
	// DefaultCgroupRoot is where the cgroup hierarchies are mounted.
	DefaultCgroupRoot = "/sys/fs/cgroup"
	// DefaultVolumeStatsPeriod is how long a volume's measured usage is
	// served before the directory is walked again: the kubelet's default
	// volumeStatsAggPeriod.
	DefaultVolumeStatsPeriod = time.Minute
)

// Provider computes the kubelet's stats Summary for this node: the node's
// own numbers from the host (root cgroup, /proc, statfs) and those of pods
// and containers from the CRI. It keeps the previous CPU sample of the
// node, of every pod and of every container, because the CRI reports
// cumulative CPU time only and usageNanoCores is a rate. It is safe for
// concurrent use.
type Provider struct {
	rt  criapi.RuntimeService
	img criapi.ImageManagerService

	nodeName   string
	rootDir    string
	podsDir    string
	podLogsDir string
	procRoot   string
	cgroupRoot string
	nodeCgroup string
	volPeriod  time.Duration
	log        *slog.Logger
	clock      clock.PassiveClock
	created    time.Time

	cpu   *rateCache
	du    *duCache
	pids  *pidCache // sandboxes' processes
	cpids *pidCache // running containers' processes (/metrics/cadvisor)

	bootMu sync.Mutex
	boot   time.Time

	roundMu sync.Mutex
	round   *criRound // CRI calls in flight
}

// Option changes a setting of the Provider.
type Option func(*Provider)

// WithNodeName sets the node name the Summary reports (default: the
// host name, lower-cased).
func WithNodeName(name string) Option { return func(p *Provider) { p.nodeName = name } }

// WithRootDir sets the directory whose filesystem is the node's nodefs
// (default DefaultRootDir).
func WithRootDir(dir string) Option { return func(p *Provider) { p.rootDir = dir } }

// WithPodsDir sets the directory of the pods' directories,
// <dir>/<uid>/volumes/<plugin>/<volume> and <dir>/<uid>/etc-hosts as
// podsyncd lays them out (default: <root dir>/pods).
func WithPodsDir(dir string) Option { return func(p *Provider) { p.podsDir = dir } }

// WithPodLogsDir sets the root of the pod log directories (default
// DefaultPodLogsDir).
func WithPodLogsDir(dir string) Option { return func(p *Provider) { p.podLogsDir = dir } }

// WithProcRoot sets where proc is mounted (default DefaultProcRoot); tests
// point it at a fixture tree.
func WithProcRoot(dir string) Option { return func(p *Provider) { p.procRoot = dir } }

// WithCgroupRoot sets where the cgroup hierarchies are mounted (default
// DefaultCgroupRoot): the unified hierarchy itself for cgroup v2, the
// directory holding cpuacct/ and memory/ for cgroup v1.
func WithCgroupRoot(dir string) Option { return func(p *Provider) { p.cgroupRoot = dir } }

// WithNodeCgroup makes the node's CPU and memory those of a cgroup below
// the root ("/microlet-node-1"), for a node given a cgroup of its own
// (podsyncd's cgroup_root): its memory limit caps the capacity
// memory.available is computed from. Empty or "/" is the root, the
// kubelet's view of a whole machine.
func WithNodeCgroup(path string) Option {
	return func(p *Provider) {
		if path == "/" {
			path = ""
		}
		p.nodeCgroup = path
	}
}

// WithVolumeStatsPeriod sets how long a volume's measured usage is kept
// (default DefaultVolumeStatsPeriod); 0 walks the volumes on every full
// Summary.
func WithVolumeStatsPeriod(d time.Duration) Option { return func(p *Provider) { p.volPeriod = d } }

// WithLogger sets the logger for data skipped as bad (default
// slog.Default(); nil keeps it).
func WithLogger(l *slog.Logger) Option {
	return func(p *Provider) {
		if l != nil {
			p.log = l
		}
	}
}

// WithClock sets the clock that times node samples and expires cached
// samples (default the real clock; nil keeps it).
func WithClock(c clock.PassiveClock) Option {
	return func(p *Provider) {
		if c != nil {
			p.clock = c
		}
	}
}

// New returns a Provider reading pods and containers through rt and the
// image filesystem through img, which are typically what
// k8s.io/cri-client's NewRemoteRuntimeService and NewRemoteImageService
// return for the node's CRI endpoint. Both are required.
func New(rt criapi.RuntimeService, img criapi.ImageManagerService, opts ...Option) *Provider {
	p := &Provider{
		rt:         rt,
		img:        img,
		rootDir:    DefaultRootDir,
		podLogsDir: DefaultPodLogsDir,
		procRoot:   DefaultProcRoot,
		cgroupRoot: DefaultCgroupRoot,
		volPeriod:  DefaultVolumeStatsPeriod,
		log:        slog.Default(),
		clock:      clock.RealClock{},
		cpu:        newRateCache(),
		pids:       newPIDCache(),
		cpids:      newPIDCache(),
	}
	for _, o := range opts {
		o(p)
	}
	if p.nodeName == "" {
		h, _ := os.Hostname()
		p.nodeName = strings.ToLower(h)
	}
	if p.podsDir == "" {
		p.podsDir = filepath.Join(p.rootDir, "pods")
	}
	p.du = newDUCache(p.volPeriod)
	p.created = p.clock.Now()
	return p
}

// Summary returns the node's stats Summary, the document the kubelet
// serves at /stats/summary. With onlyCPUAndMemory it holds what
// ?only_cpu_and_memory=true holds: node and pod CPU, memory and swap, and
// per container CPU, memory and swap, without filesystems, network,
// volumes or rlimits (and without their cost).
//
// It fails only when the whole answer would be meaningless, where the
// kubelet fails: the root cgroup, the CRI's pod listing, and for the full
// Summary the nodefs and the image filesystem. A pod or container with
// bad data is logged and left out; a number that cannot be read is left
// unset.
//
// Every call also advances the CPU samples usageNanoCores is computed
// from, so the first call reports no usageNanoCores and later ones report
// the average since the previous call (at least a second before).
func (p *Provider) Summary(ctx context.Context, onlyCPUAndMemory bool) (*statsv1alpha1.Summary, error) {
	if p.rt == nil || p.img == nil {
		return nil, errors.New("stats: no CRI runtime or image service")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := p.clock.Now()
	var rootFs fsInfo
	if !onlyCPUAndMemory {
		var err error
		if rootFs, err = statFS(p.rootDir, now); err != nil {
			return nil, fmt.Errorf("failed to get rootFs stats: %w", err)
		}
	}

	var (
		wg      sync.WaitGroup
		pods    []statsv1alpha1.PodStats
		podsErr error
		imageFs *statsv1alpha1.FsStats
		imgErr  error
	)
	wg.Go(func() { pods, podsErr = p.podStats(ctx, onlyCPUAndMemory, now, rootFs) })
	if !onlyCPUAndMemory {
		wg.Go(func() { imageFs, imgErr = p.imageFsStats(ctx, now) })
	}
	node, nodeErr := p.nodeStats(onlyCPUAndMemory, now, rootFs)
	wg.Wait()
	switch {
	case nodeErr != nil:
		return nil, nodeErr
	case podsErr != nil:
		return nil, fmt.Errorf("failed to list pod stats: %w", podsErr)
	case imgErr != nil:
		return nil, fmt.Errorf("failed to get imageFs stats: %w", imgErr)
	}
	if !onlyCPUAndMemory {
		containerFs := *imageFs
		node.Runtime = &statsv1alpha1.RuntimeStats{ImageFs: imageFs, ContainerFs: &containerFs}
	}
	p.cpu.expire(now)
	p.du.expire(now)
	return &statsv1alpha1.Summary{Node: node, Pods: pods}, nil
}

// bootTime is when the host booted, the node's startTime; read once.
func (p *Provider) bootTime(proc procfs.FS) time.Time {
	p.bootMu.Lock()
	defer p.bootMu.Unlock()
	if p.boot.IsZero() {
		st, err := proc.Stat()
		if err != nil {
			p.log.Warn("node start time unknown", "err", err)
			return time.Time{}
		}
		p.boot = time.Unix(int64(st.BootTime), 0) //nolint:gosec // seconds since the epoch fit
	}
	return p.boot
}

// imageFsStats is the runtime's first image filesystem, as the kubelet
// reports it: usage from the CRI, capacity from the filesystem of its
// mount point when that is visible here.
func (p *Provider) imageFsStats(ctx context.Context, now time.Time) (*statsv1alpha1.FsStats, error) {
	resp, err := p.img.ImageFsInfo(ctx)
	if err != nil {
		return nil, err
	}
	if len(resp.GetImageFilesystems()) == 0 || resp.GetImageFilesystems()[0] == nil {
		return nil, errors.New("imageFs information is unavailable")
	}
	fs := resp.GetImageFilesystems()[0]
	out := &statsv1alpha1.FsStats{
		Time:       metav1.NewTime(now),
		UsedBytes:  value(fs.UsedBytes),
		InodesUsed: value(fs.InodesUsed),
	}
	if fs.Timestamp != 0 {
		out.Time = metav1.NewTime(time.Unix(0, fs.Timestamp))
	}
	if mp := fs.GetFsId().GetMountpoint(); mp != "" {
		if fi, err := statFS(mp, now); err == nil {
			out.AvailableBytes, out.CapacityBytes = ptr(fi.available), ptr(fi.capacity)
			out.Inodes, out.InodesFree = ptr(fi.inodes), ptr(fi.inodesFree)
		} else {
			p.log.Debug("image filesystem not visible here", "mountpoint", mp, "err", err)
		}
	}
	return out, nil
}
