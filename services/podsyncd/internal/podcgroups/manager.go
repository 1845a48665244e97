package podcgroups

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	cgmanager "github.com/opencontainers/cgroups/manager"
	cgsystemd "github.com/opencontainers/cgroups/systemd"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/services/podsyncd/internal/resources"
)

// The kubelet's names and periods (pkg/kubelet/cm).
const (
	// NodeCgroup is the cgroup of all pods, below the root.
	NodeCgroup = "kubepods"
	// qosUpdatePeriod is how often the QoS cgroups are brought in line
	// with the pods (the kubelet's periodicQOSCgroupUpdateInterval).
	qosUpdatePeriod = time.Minute
)

// Config configures a Manager.
type Config struct {
	// Driver is DriverCgroupfs or DriverSystemd, as the runtime reports.
	Driver string
	// Root is the cgroupfs path below which kubepods is made ("/" when
	// empty: /kubepods); it is created when missing.
	Root string
	// PodPidsLimit is every pod cgroup's pids.max; 0 or less sets none.
	PodPidsLimit int64
	// NodeAllocatable is what kubepods gets (capacity minus the
	// reservations); empty leaves kubepods unlimited.
	NodeAllocatable corev1.ResourceList
	// NoCPULimits leaves pod CFS quotas unlimited (the kubelet's
	// cpuCFSQuota=false).
	NoCPULimits bool
	// ActivePods lists the pods that count for the Burstable QoS cgroup's
	// CPU shares; nil counts none.
	ActivePods func() []*corev1.Pod
	// Log receives what the manager does.
	Log *slog.Logger
}

// Manager creates and removes the QoS and pod cgroups.
type Manager struct {
	cfg  Config
	node Name
	qos  map[corev1.PodQOSClass]Name

	mu      sync.Mutex
	updated time.Time
}

// New validates cfg and creates the node and QoS cgroups (updating them
// when they exist): kubepods with NodeAllocatable, burstable, besteffort
// with the least CPU shares.
func New(cfg Config) (*Manager, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	switch cfg.Driver {
	case DriverCgroupfs:
	case DriverSystemd:
		if !cgsystemd.IsRunningSystemd() {
			return nil, errors.New("cgroup driver systemd: systemd is not running on this host")
		}
	default:
		return nil, fmt.Errorf("cgroup driver %q: want %s or %s", cfg.Driver, DriverCgroupfs, DriverSystemd)
	}
	root, err := ParseCgroupfs(cfg.Root)
	if err != nil {
		return nil, err
	}
	if cfg.Driver == DriverSystemd {
		for _, c := range root {
			if strings.Contains(c, "_") {
				return nil, fmt.Errorf("cgroup root %q: a component has %q, which the systemd driver cannot name", cfg.Root, "_")
			}
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		return nil, fmt.Errorf("no cgroup filesystem: %w", err)
	}
	node := root.Child(NodeCgroup)
	m := &Manager{cfg: cfg, node: node, qos: map[corev1.PodQOSClass]Name{
		corev1.PodQOSGuaranteed: node,
		corev1.PodQOSBurstable:  node.Child("burstable"),
		corev1.PodQOSBestEffort: node.Child("besteffort"),
	}}
	for i := 1; i < len(root); i++ { // the root's own ancestors, when missing
		if err := m.ensure(root[:i], Resources{}); err != nil {
			return nil, err
		}
	}
	if len(root) > 0 {
		if err := m.ensure(root, Resources{}); err != nil {
			return nil, err
		}
	}
	if err := m.ensure(node, ForNode(cfg.NodeAllocatable)); err != nil {
		return nil, err
	}
	if err := m.ensure(m.qos[corev1.PodQOSBurstable], Resources{}); err != nil {
		return nil, err
	}
	minShares := uint64(resources.MinShares)
	if err := m.ensure(m.qos[corev1.PodQOSBestEffort], Resources{CPUShares: &minShares}); err != nil {
		return nil, err
	}
	return m, m.UpdateQOS()
}

// NodeName is kubepods' host path (cgroupfs form, also for systemd).
func (m *Manager) NodeName() string { return m.literal(m.node) }

// SetActivePods installs the list of pods that count for the Burstable QoS
// cgroup's CPU shares (call before the first EnsurePod).
func (m *Manager) SetActivePods(f func() []*corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg.ActivePods = f
}

// name is the pod's cgroup.
func (m *Manager) name(pod *corev1.Pod) Name {
	return m.qos[resources.QOSClass(pod)].Child(podComponent(pod.UID))
}

// literal is n on the host, as the driver names it.
func (m *Manager) literal(n Name) string {
	if m.cfg.Driver == DriverSystemd {
		return n.Systemd()
	}
	return n.Cgroupfs()
}

// Parent is the pod's cgroup as the CRI's CgroupParent, as the kubelet
// passes it: a cgroupfs path, or the path of systemd slices.
func (m *Manager) Parent(pod *corev1.Pod) string { return m.literal(m.name(pod)) }

// EnsurePod creates the pod's cgroup with its limits when it does not
// exist (an existing one is left as it is, as the kubelet leaves it), first
// bringing the QoS cgroups in line with the active pods.
func (m *Manager) EnsurePod(pod *corev1.Pod) error {
	n := m.name(pod)
	if m.exists(n) {
		return nil
	}
	if err := m.UpdateQOS(); err != nil {
		m.cfg.Log.Warn("could not update the QoS cgroups", "err", err)
	}
	r := ForPod(pod, !m.cfg.NoCPULimits, resources.QuotaPeriod)
	if m.cfg.PodPidsLimit > 0 {
		r.PidsLimit = &m.cfg.PodPidsLimit
	}
	if err := m.create(n, r); err != nil {
		return err
	}
	m.cfg.Log.Info("created pod cgroup", "pod", pod.Namespace+"/"+pod.Name, "cgroup", m.literal(n))
	return nil
}

// UpdateQOS sets the Burstable QoS cgroup's CPU shares to the Burstable
// pods' summed requests and keeps BestEffort at the least shares.
func (m *Manager) UpdateQOS() error {
	var pods []*corev1.Pod
	m.mu.Lock()
	active := m.cfg.ActivePods
	m.mu.Unlock()
	if active != nil {
		pods = active()
	}
	b, be := burstableShares(pods), uint64(resources.MinShares)
	err := errors.Join(
		m.update(m.qos[corev1.PodQOSBurstable], Resources{CPUShares: &b}),
		m.update(m.qos[corev1.PodQOSBestEffort], Resources{CPUShares: &be}))
	if err == nil {
		m.mu.Lock()
		m.updated = time.Now()
		m.mu.Unlock()
	}
	return err
}

// Housekeeping updates the QoS cgroups once a minute and removes the pod
// cgroups that keep does not claim (orphans), as the kubelet's
// cleanupOrphanedPodCgroups.
func (m *Manager) Housekeeping(keep func(types.UID) bool) {
	m.mu.Lock()
	due := time.Since(m.updated) >= qosUpdatePeriod
	m.mu.Unlock()
	if due {
		if err := m.UpdateQOS(); err != nil {
			m.cfg.Log.Warn("could not update the QoS cgroups", "err", err)
		}
	}
	pods, err := m.Pods()
	if err != nil {
		m.cfg.Log.Warn("could not list pod cgroups", "err", err)
		return
	}
	for uid, n := range pods {
		if keep(uid) {
			continue
		}
		m.cfg.Log.Info("removing orphaned pod cgroup", "uid", uid, "cgroup", m.literal(n))
		if err := m.destroy(n); err != nil {
			m.cfg.Log.Warn("could not remove orphaned pod cgroup; will retry", "uid", uid, "err", err)
		}
	}
}

// DestroyPod removes the cgroup of the pod with uid, whatever its QoS
// class, killing any process left in it first, as the kubelet does once a
// pod's containers are stopped.
func (m *Manager) DestroyPod(uid types.UID) error {
	var errs []error
	for _, q := range m.qos {
		if n := q.Child(podComponent(uid)); m.exists(n) {
			errs = append(errs, m.destroy(n))
		}
	}
	return errors.Join(errs...)
}

// Pods finds the pod cgroups below the QoS cgroups, by pod UID.
func (m *Manager) Pods() (map[types.UID]Name, error) {
	out := map[types.UID]Name{}
	for _, q := range m.qos {
		mgr, err := m.libManager(q, Resources{})
		if err != nil {
			return nil, err
		}
		for _, dir := range mgr.GetPaths() {
			ents, err := os.ReadDir(dir)
			if err != nil {
				if os.IsNotExist(err) {
					continue
				}
				return nil, err
			}
			for _, e := range ents {
				if !e.IsDir() {
					continue
				}
				if uid := podUID(m.cfg.Driver, e.Name()); uid != "" {
					out[uid] = q.Child(podComponent(uid))
				}
			}
		}
	}
	return out, nil
}

// Paths are n's directories on the host, by controller ("" for the
// unified hierarchy of cgroup v2).
func (m *Manager) Paths(n Name) (map[string]string, error) {
	mgr, err := m.libManager(n, Resources{})
	if err != nil {
		return nil, err
	}
	return mgr.GetPaths(), nil
}

// PodPaths is Paths of the pod's cgroup.
func (m *Manager) PodPaths(pod *corev1.Pod) (map[string]string, error) { return m.Paths(m.name(pod)) }

// libConfig is n in the library's terms.
func (m *Manager) libConfig(n Name, r Resources) *cgroups.Cgroup {
	c := &cgroups.Cgroup{Systemd: m.cfg.Driver == DriverSystemd, Resources: toLib(r)}
	if !c.Systemd {
		c.Path = n.Cgroupfs()
		return c
	}
	dir, base := path.Split(n.Systemd())
	if dir == "/" {
		c.Parent = "-.slice"
	} else {
		c.Parent = path.Base(dir)
	}
	c.Name = base
	return c
}

func (m *Manager) libManager(n Name, r Resources) (cgroups.Manager, error) {
	return cgmanager.New(m.libConfig(n, r))
}

func toLib(r Resources) *cgroups.Resources {
	out := &cgroups.Resources{SkipDevices: true, SkipFreezeOnSet: true}
	if r.CPUShares != nil {
		if cgroups.IsCgroup2UnifiedMode() {
			out.CpuWeight = sharesToWeight(*r.CPUShares)
		} else {
			out.CpuShares = *r.CPUShares
		}
	}
	if r.CPUQuota != nil {
		out.CpuQuota = *r.CPUQuota
	}
	if r.CPUPeriod != nil {
		out.CpuPeriod = *r.CPUPeriod
	}
	if r.Memory != nil {
		out.Memory = *r.Memory
	}
	out.PidsLimit = r.PidsLimit
	if r.HugePageLimits != nil && hugetlbSupported() {
		out.HugetlbLimit = hugetlbLimits(r.HugePageLimits, cgroups.HugePageSizes())
	}
	return out
}

// hugetlbSupported says whether the hugetlb controller is there (an
// optional one for the kubelet: limits are skipped without it, as on
// hosts whose cgroup v1 tree does not mount it).
func hugetlbSupported() bool {
	if cgroups.IsCgroup2UnifiedMode() {
		b, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		return err == nil && slices.Contains(strings.Fields(string(b)), "hugetlb")
	}
	_, err := os.Stat("/sys/fs/cgroup/hugetlb")
	return err == nil
}

// hugetlbLimits is the limit of every page size the host has (sizes as
// the library names them: "2MB", "1GB"), 0 for those limits lacks.
func hugetlbLimits(limits map[int64]int64, sizes []string) []*cgroups.HugepageLimit {
	out := make([]*cgroups.HugepageLimit, 0, len(sizes))
	for _, s := range sizes {
		var v int64
		if b, ok := pageSizeBytes(s); ok {
			v = max(limits[b], 0)
		}
		out = append(out, &cgroups.HugepageLimit{Pagesize: s, Limit: uint64(v)})
	}
	return out
}

// pageSizeBytes parses the library's page size names (<n>KB, MB or GB,
// binary units).
func pageSizeBytes(s string) (int64, bool) {
	for i, unit := range []string{"KB", "MB", "GB"} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return 0, false
			}
			return v << (10 * (i + 1)), true
		}
	}
	return 0, false
}

// sharesToWeight maps cgroup v1 shares [2, 262144] onto cgroup v2 weights
// [1, 10000] as the kubelet does.
func sharesToWeight(s uint64) uint64 {
	if s >= resources.MaxShares {
		return 10000
	}
	s = max(s, resources.MinShares)
	return 1 + (s-2)*9999/262142
}

// exists says whether n exists in every controller pods need.
func (m *Manager) exists(n Name) bool {
	paths, err := m.Paths(n)
	if err != nil {
		return false
	}
	for ctrl, p := range paths {
		if ctrl != "" && !slices.Contains([]string{"cpu", "cpuacct", "cpuset", "memory", "pids"}, ctrl) {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return len(paths) > 0
}

// ensure creates n when missing, else updates it with r.
func (m *Manager) ensure(n Name, r Resources) error {
	if m.exists(n) {
		return m.update(n, r)
	}
	return m.create(n, r)
}

// create makes n in every controller and writes r.
func (m *Manager) create(n Name, r Resources) error {
	mgr, err := m.libManager(n, r)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", m.literal(n), err)
	}
	// Apply(-1) makes the directories without moving a process in.
	if err := mgr.Apply(-1); err != nil {
		return fmt.Errorf("create cgroup %s: %w", m.literal(n), err)
	}
	if err := mgr.Set(toLib(r)); err != nil {
		return fmt.Errorf("set cgroup %s: %w", m.literal(n), err)
	}
	return nil
}

func (m *Manager) update(n Name, r Resources) error {
	mgr, err := m.libManager(n, r)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", m.literal(n), err)
	}
	if err := mgr.Set(toLib(r)); err != nil {
		return fmt.Errorf("set cgroup %s: %w", m.literal(n), err)
	}
	return nil
}

// destroy kills what still runs in n and below it, then removes n.
func (m *Manager) destroy(n Name) error {
	mgr, err := m.libManager(n, Resources{})
	if err != nil {
		return err
	}
	var errs []error
	for attempt := 0; attempt < 5; attempt++ {
		errs = errs[:0]
		pids := map[int]bool{}
		for _, p := range mgr.GetPaths() {
			if _, err := os.Stat(p); err != nil {
				continue
			}
			_ = filepath.WalkDir(p, func(dir string, d os.DirEntry, err error) error {
				if err != nil || !d.IsDir() {
					return nil
				}
				ps, _ := cgroups.GetPids(dir)
				for _, pid := range ps {
					pids[pid] = true
				}
				return nil
			})
		}
		if len(pids) == 0 {
			break
		}
		for pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
		}
		time.Sleep(10 * time.Millisecond << attempt)
	}
	if len(errs) > 0 {
		return fmt.Errorf("kill the processes of cgroup %s: %w", m.literal(n), errors.Join(errs...))
	}
	if err := mgr.Destroy(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", m.literal(n), err)
	}
	m.cfg.Log.Info("removed pod cgroup", "cgroup", m.literal(n))
	return nil
}
