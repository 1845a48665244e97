package stats

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// rootCgroup is one reading of the root cgroup's CPU and memory counters,
// with the meanings cAdvisor gives them for the root container.
type rootCgroup struct {
	// cpuNanos is the CPU time every task on the node has used.
	cpuNanos uint64
	// usage is the memory charged to the root cgroup (page cache included).
	usage uint64
	// inactiveFile is the page cache the kernel may reclaim first; the
	// working set leaves it out.
	inactiveFile uint64
	rss          uint64
	pgfault      uint64
	pgmajfault   uint64
	// faults says whether the fault counters were found.
	faults bool
	// limit is the memory limit of a node cgroup below the root (0: none
	// or the root itself).
	limit uint64
}

// workingSet is usage less inactive file pages, never below zero: the
// number the kubelet's eviction and `kubectl top node` use.
func (r rootCgroup) workingSet() uint64 {
	if r.inactiveFile > r.usage {
		return 0
	}
	return r.usage - r.inactiveFile
}

// cgroupV2 says whether the hierarchy at root is the unified one (cgroup
// v2). A hybrid host (v1 controllers, an empty unified tree under
// root/unified) counts as v1, which is where its CPU and memory
// controllers are.
func cgroupV2(root string) bool {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return err == nil
}

// readRootCgroup reads the root cgroup under cgroupRoot. On cgroup v2 the
// root keeps no memory usage of its own: mi (the reading of meminfo, or
// its error miErr) and procRoot's vmstat stand in.
func readRootCgroup(cgroupRoot, procRoot string, mi procfs.Meminfo, miErr error) (rootCgroup, error) {
	if cgroupV2(cgroupRoot) {
		return readRootCgroupV2(cgroupRoot, procRoot, mi, miErr)
	}
	return readRootCgroupV1(cgroupRoot, "")
}

// readNodeCgroup reads the cgroup node (a path below the root, "/x/y")
// as the node's own: its counters and its memory limit.
func readNodeCgroup(cgroupRoot, node string) (rootCgroup, error) {
	if !cgroupV2(cgroupRoot) {
		r, err := readRootCgroupV1(cgroupRoot, node)
		if err != nil {
			return r, err
		}
		if l, err := readUint(filepath.Join(cgroupRoot, "memory", node, "memory.limit_in_bytes")); err == nil {
			r.limit = l
		}
		return r, nil
	}
	var r rootCgroup
	dir := filepath.Join(cgroupRoot, node)
	cpu, err := readFlatKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return r, err
	}
	r.cpuNanos = cpu["usage_usec"] * 1000
	if r.usage, err = readUint(filepath.Join(dir, "memory.current")); err != nil {
		return r, err
	}
	st, err := readFlatKeyed(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return r, err
	}
	r.inactiveFile, r.rss = st["inactive_file"], st["anon"]
	if _, ok := st["pgfault"]; ok {
		r.pgfault, r.pgmajfault, r.faults = st["pgfault"], st["pgmajfault"], true
	}
	if l, err := readUint(filepath.Join(dir, "memory.max")); err == nil {
		r.limit = l // "max" does not parse: no limit
	}
	return r, nil
}

// cpuacctDirs are the names the v1 cpuacct hierarchy is mounted under:
// alone, or co-mounted with cpu in either order.
var cpuacctDirs = []string{"cpuacct", "cpu,cpuacct", "cpuacct,cpu"}

func readRootCgroupV1(root, sub string) (rootCgroup, error) {
	var r rootCgroup
	var err error
	found := false
	for _, d := range cpuacctDirs {
		r.cpuNanos, err = readUint(filepath.Join(root, d, sub, "cpuacct.usage"))
		if err == nil {
			found = true
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return r, err
		}
	}
	if !found {
		return r, fmt.Errorf("cgroup v1: no cpuacct.usage under %s (tried %s)", root, strings.Join(cpuacctDirs, ", "))
	}
	mem := filepath.Join(root, "memory", sub)
	if r.usage, err = readUint(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
		return r, err
	}
	st, err := readFlatKeyed(filepath.Join(mem, "memory.stat"))
	if err != nil {
		return r, err
	}
	// The root has use_hierarchy set, so the total_ counters are the
	// node's; the plain ones count only tasks in the root cgroup itself.
	r.inactiveFile = pick(st, "total_inactive_file", "inactive_file")
	r.rss = pick(st, "total_rss", "rss")
	if _, ok := st["total_pgfault"]; ok {
		r.pgfault, r.pgmajfault, r.faults = st["total_pgfault"], st["total_pgmajfault"], true
	} else if _, ok := st["pgfault"]; ok {
		r.pgfault, r.pgmajfault, r.faults = st["pgfault"], st["pgmajfault"], true
	}
	return r, nil
}

func readRootCgroupV2(root, procRoot string, mi procfs.Meminfo, miErr error) (rootCgroup, error) {
	var r rootCgroup
	cpu, err := readFlatKeyed(filepath.Join(root, "cpu.stat"))
	if err != nil {
		return r, err
	}
	usec, ok := cpu["usage_usec"]
	if !ok {
		return r, fmt.Errorf("%s: no usage_usec", filepath.Join(root, "cpu.stat"))
	}
	r.cpuNanos = usec * 1000
	// The root of the unified hierarchy has no memory.current: like runc,
	// take the used memory from /proc/meminfo (MemTotal - MemFree).
	if miErr != nil {
		return r, fmt.Errorf("meminfo: %w", miErr)
	}
	if mi.MemTotalBytes == nil || mi.MemFreeBytes == nil {
		return r, errors.New("meminfo: MemTotal or MemFree missing")
	}
	if *mi.MemFreeBytes < *mi.MemTotalBytes {
		r.usage = *mi.MemTotalBytes - *mi.MemFreeBytes
	}
	st, err := readFlatKeyed(filepath.Join(root, "memory.stat"))
	switch {
	case err == nil:
		r.inactiveFile, r.rss = st["inactive_file"], st["anon"]
		if _, ok := st["pgfault"]; ok {
			r.pgfault, r.pgmajfault, r.faults = st["pgfault"], st["pgmajfault"], true
		}
	case errors.Is(err, os.ErrNotExist):
		// Older kernels keep no memory.stat at the root: the same numbers
		// are system-wide in meminfo and vmstat.
		r.inactiveFile = deref(mi.InactiveFileBytes)
		r.rss = deref(mi.AnonPagesBytes)
		if vm, err := readFlatKeyed(filepath.Join(procRoot, "vmstat")); err == nil {
			if _, ok := vm["pgfault"]; ok {
				r.pgfault, r.pgmajfault, r.faults = vm["pgfault"], vm["pgmajfault"], true
			}
		}
	default:
		return r, err
	}
	return r, nil
}

// pick returns the first of keys present in m, or 0.
func pick(m map[string]uint64, keys ...string) uint64 {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return 0
}

func deref(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// readUint reads a file holding one unsigned decimal number.
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func readFlatKeyed(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := parseFlatKeyed(b)
	if len(m) == 0 {
		return nil, fmt.Errorf("%s: no \"key value\" lines", path)
	}
	return m, nil
}

// parseFlatKeyed parses the "key value" lines of memory.stat, cpu.stat
// and /proc/vmstat. A line that is not one key and one unsigned number is
// skipped rather than failing the file: kernels add keys, and one odd
// counter must not cost the node its CPU and memory numbers.
func parseFlatKeyed(b []byte) map[string]uint64 {
	m := make(map[string]uint64, 64)
	for line := range bytes.Lines(b) {
		key, val, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
		if !ok || len(key) == 0 {
			continue
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			continue
		}
		m[string(key)] = v
	}
	return m
}
