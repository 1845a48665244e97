package docker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// procCgroups is where a process sits in the cgroup hierarchies, from
// /proc/<pid>/cgroup: v1 controller name -> path, and the unified (v2)
// path. Paths are relative to the hierarchies' roots as this process's
// cgroup namespace sees them, which is how /sys/fs/cgroup shows them too.
type procCgroups struct {
	v1 map[string]string
	// v1Mount names each v1 controller's hierarchy as the kernel lists
	// it ("cpu,cpuacct"), the usual name of its mount point.
	v1Mount map[string]string
	unified string
}

// parseProcCgroup parses the lines of /proc/<pid>/cgroup
// (hierarchy-ID:controller-list:path).
func parseProcCgroup(b []byte) (procCgroups, error) {
	pc := procCgroups{v1: map[string]string{}, v1Mount: map[string]string{}}
	found := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if line == "" {
			continue
		}
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			return pc, fmt.Errorf("bad cgroup line %q", line)
		}
		ctrls, p, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(p, "/") {
			return pc, fmt.Errorf("bad cgroup line %q", line)
		}
		found = true
		if id == "0" && ctrls == "" {
			pc.unified = p
			continue
		}
		for c := range strings.SplitSeq(ctrls, ",") {
			if c != "" {
				pc.v1[c], pc.v1Mount[c] = p, ctrls
			}
		}
	}
	if !found {
		return pc, errors.New("no cgroup lines")
	}
	return pc, nil
}

// cgroupRef names one cgroup: the pod's, or one container's.
type cgroupRef struct {
	root string // the cgroup file system's mount point, /sys/fs/cgroup
	pc   procCgroups
	v2   bool
}

// cgroupOf finds the cgroup of a process (a sandbox's pause process).
// cgroup v1 is used when the memory and cpuacct controllers are mounted
// as v1 hierarchies, v2 otherwise.
func cgroupOf(procRoot, cgroupRoot string, pid int) (cgroupRef, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return cgroupRef{}, err
	}
	pc, err := parseProcCgroup(b)
	if err != nil {
		return cgroupRef{}, err
	}
	_, mem := pc.v1["memory"]
	_, cpu := pc.v1["cpuacct"]
	ref := cgroupRef{root: cgroupRoot, pc: pc, v2: !mem || !cpu}
	if ref.v2 && pc.unified == "" {
		return cgroupRef{}, errors.New("process is in neither a v1 memory/cpuacct nor a v2 cgroup")
	}
	return ref, nil
}

// parent is the cgroup one level up in every hierarchy: the pod's cgroup
// when ref is one of the pod's containers' and the pod has a cgroup parent.
func (r cgroupRef) parent() cgroupRef {
	out := cgroupRef{root: r.root, v2: r.v2, pc: procCgroups{v1: map[string]string{}, v1Mount: r.pc.v1Mount, unified: path.Dir(r.pc.unified)}}
	for c, p := range r.pc.v1 {
		out.pc.v1[c] = path.Dir(p)
	}
	return out
}

// dir is the directory of the cgroup for a v1 controller (ignored on v2).
func (r cgroupRef) dir(controller string) string {
	if r.v2 {
		return filepath.Join(r.root, r.pc.unified)
	}
	p := r.pc.v1[controller]
	// The hierarchy is mounted under the kernel's name for it
	// ("cpu,cpuacct"), with symlinks for each controller on most systems.
	if m := r.pc.v1Mount[controller]; m != "" {
		if d := filepath.Join(r.root, m); isDir(d) {
			return filepath.Join(d, p)
		}
	}
	return filepath.Join(r.root, controller, p)
}

// isRoot reports whether the memory cgroup is a hierarchy's root.
func (r cgroupRef) isRoot() bool {
	if r.v2 {
		return r.pc.unified == "/"
	}
	return r.pc.v1["memory"] == "/"
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// containerCgroupName matches the cgroup directory of a Docker (or other
// runtime's) container: the ID itself with the cgroupfs driver, a
// <runtime>-<id>.scope unit with the systemd one.
var containerCgroupName = regexp.MustCompile(`^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$`)

// holdsOnly reports whether every child cgroup of r is the cgroup of one
// of the given containers. A sandbox's cgroup parent is the pod's own
// cgroup only then: the kubelet gives each pod its own (kubepods/.../pod<uid>),
// but a caller may pass a shared parent (critest passes system.slice with
// the systemd driver), whose usage is not the pod's.
func (r cgroupRef) holdsOnly(ids map[string]bool) (bool, error) {
	entries, err := os.ReadDir(r.dir("memory"))
	if err != nil {
		return false, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		m := containerCgroupName.FindStringSubmatch(e.Name())
		if m == nil || !ids[m[1]] {
			return false, nil
		}
	}
	return true, nil
}

// cgroupSample is one reading of a cgroup's CPU, memory and process
// counters.
type cgroupSample struct {
	at         time.Time
	cpuNanos   uint64
	usage      uint64
	workingSet uint64
	rss        uint64
	pageFaults uint64
	majFaults  uint64
	limit      uint64 // 0: unlimited
	swap       *uint64
	pids       *uint64
}

// unlimitedV1 is above any real limit: cgroup v1 reports "no limit" as
// a huge page-aligned number (9223372036854771712 on 4 KiB pages).
const unlimitedV1 = 1 << 62

// readCgroup reads the counters of r; hierarchical ones (a parent's
// include its children's), as the kubelet reads a pod's cgroup.
func readCgroup(r cgroupRef) (cgroupSample, error) {
	if r.v2 {
		return readCgroupV2(filepath.Join(r.root, r.pc.unified))
	}
	var s cgroupSample
	cpu, err := readUint(filepath.Join(r.dir("cpuacct"), "cpuacct.usage"))
	if err != nil {
		return s, err
	}
	memDir := r.dir("memory")
	usage, err := readUint(filepath.Join(memDir, "memory.usage_in_bytes"))
	if err != nil {
		return s, err
	}
	stat, err := readFlatKeyed(filepath.Join(memDir, "memory.stat"))
	if err != nil {
		return s, err
	}
	s.at = time.Now()
	s.cpuNanos, s.usage = cpu, usage
	s.workingSet = subFloor(usage, stat["total_inactive_file"])
	s.rss = stat["total_rss"]
	s.pageFaults, s.majFaults = stat["total_pgfault"], stat["total_pgmajfault"]
	if v, ok := stat["total_swap"]; ok {
		s.swap = &v
	}
	if l, err := readUint(filepath.Join(memDir, "memory.limit_in_bytes")); err == nil && l < unlimitedV1 {
		s.limit = l
	}
	if n, err := readUint(filepath.Join(r.dir("pids"), "pids.current")); err == nil {
		s.pids = &n
	}
	return s, nil
}

func readCgroupV2(dir string) (cgroupSample, error) {
	var s cgroupSample
	cpu, err := readFlatKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return s, err
	}
	usage, err := readUint(filepath.Join(dir, "memory.current"))
	if err != nil {
		return s, err
	}
	stat, err := readFlatKeyed(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return s, err
	}
	s.at = time.Now()
	s.cpuNanos, s.usage = cpu["usage_usec"]*1000, usage
	s.workingSet = subFloor(usage, stat["inactive_file"])
	s.rss = stat["anon"]
	s.pageFaults, s.majFaults = stat["pgfault"], stat["pgmajfault"]
	if v, err := readUint(filepath.Join(dir, "memory.swap.current")); err == nil {
		s.swap = &v
	}
	if l, err := readUint(filepath.Join(dir, "memory.max")); err == nil { // "max": unlimited
		s.limit = l
	}
	if n, err := readUint(filepath.Join(dir, "pids.current")); err == nil {
		s.pids = &n
	}
	return s, nil
}

func subFloor(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
}

func readFlatKeyed(p string) (map[string]uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return parseFlatKeyed(b), nil
}

// parseFlatKeyed parses cgroup "key value" lines (memory.stat, cpu.stat);
// lines that are not a key and an unsigned number are skipped.
func parseFlatKeyed(b []byte) map[string]uint64 {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || k == "" {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// criCPUFromCgroup and criMemoryFromCgroup turn a cgroup reading into the
// CRI's usage messages, stamped with the reading's time.
func criCPUFromCgroup(s cgroupSample) *runtimeapi.CpuUsage {
	return &runtimeapi.CpuUsage{Timestamp: s.at.UnixNano(), UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: s.cpuNanos}}
}

func criMemoryFromCgroup(s cgroupSample) *runtimeapi.MemoryUsage {
	m := &runtimeapi.MemoryUsage{
		Timestamp:       s.at.UnixNano(),
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: s.workingSet},
		UsageBytes:      &runtimeapi.UInt64Value{Value: s.usage},
		RssBytes:        &runtimeapi.UInt64Value{Value: s.rss},
		PageFaults:      &runtimeapi.UInt64Value{Value: s.pageFaults},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: s.majFaults},
	}
	if s.limit > 0 {
		m.AvailableBytes = &runtimeapi.UInt64Value{Value: subFloor(s.limit, s.workingSet)}
	}
	return m
}

// sandboxNetwork reads the interfaces of a sandbox's network namespace
// through its pause process, as cAdvisor does for the kubelet; the
// loopback is left out. eth0 is the default interface, as in the kubelet.
func sandboxNetwork(procRoot string, pid int) (*runtimeapi.NetworkUsage, error) {
	fs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, err
	}
	p, err := fs.Proc(pid)
	if err != nil {
		return nil, err
	}
	nd, err := p.NetDev()
	if err != nil {
		return nil, err
	}
	out := &runtimeapi.NetworkUsage{Timestamp: time.Now().UnixNano()}
	for _, name := range slices.Sorted(maps.Keys(nd)) {
		if name == "lo" {
			continue
		}
		l := nd[name]
		iu := &runtimeapi.NetworkInterfaceUsage{
			Name:    name,
			RxBytes: &runtimeapi.UInt64Value{Value: l.RxBytes}, RxErrors: &runtimeapi.UInt64Value{Value: l.RxErrors},
			TxBytes: &runtimeapi.UInt64Value{Value: l.TxBytes}, TxErrors: &runtimeapi.UInt64Value{Value: l.TxErrors},
		}
		if name == defaultInterface {
			out.DefaultInterface = iu
		} else {
			out.Interfaces = append(out.Interfaces, iu)
		}
	}
	return out, nil
}

// defaultInterface is the pod's interface the kubelet reports as its
// network usage.
const defaultInterface = "eth0"
