package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/microlet/microlet/internal/procinfo"
)

// Host reads facts below its roots; the zero roots mean the real machine.
type Host struct {
	// Proc is where procfs is mounted ("/proc").
	Proc string
	// Sys is where sysfs is mounted ("/sys").
	Sys string
	// Etc holds os-release and machine-id ("/etc").
	Etc string
}

// New returns a Host reading the real machine.
func New() *Host { return &Host{Proc: "/proc", Sys: "/sys", Etc: "/etc"} }

// Facts are what a node says about itself that does not change while it runs.
type Facts struct {
	MachineID     string
	SystemUUID    string
	BootID        string
	KernelVersion string
	OSImage       string
	OS            string
	Arch          string
	NumCPU        int
	// MemoryBytes is MemTotal.
	MemoryBytes int64
	// HugePages maps a page size in bytes to the bytes reserved in pages of
	// that size (nr_hugepages × size), as the kubelet reports hugepages-<size>.
	HugePages map[int64]int64
}

// Stats are the measurements pressure is judged on.
type Stats struct {
	MemoryCapacity  int64
	MemoryAvailable int64
	Fs              FsStats
	ImageFs         FsStats
	// PIDMax is the smaller of kernel.pid_max and kernel.threads-max.
	PIDMax int64
	// PIDs is the number of processes (threads included) that exist now.
	PIDs int64
}

// FsStats describes one filesystem.
type FsStats struct {
	Path      string
	Capacity  uint64
	Available uint64
	Inodes    uint64
	InodeFree uint64
}

// Facts reads the static facts. Missing identity files leave fields empty
// rather than failing: a container may not see /sys or /etc/machine-id.
func (h *Host) Facts() (Facts, error) {
	f := Facts{OS: runtime.GOOS, Arch: runtime.GOARCH, NumCPU: runtime.NumCPU()}
	total, _, err := h.memory()
	if err != nil {
		return f, err
	}
	f.MemoryBytes = total
	f.MachineID = h.firstLine(filepath.Join(h.Etc, "machine-id"), filepath.Join(h.Etc, "../var/lib/dbus/machine-id"))
	f.SystemUUID = strings.ToLower(h.firstLine(filepath.Join(h.Sys, "class/dmi/id/product_uuid")))
	f.BootID = h.firstLine(filepath.Join(h.Proc, "sys/kernel/random/boot_id"))
	f.KernelVersion = h.firstLine(filepath.Join(h.Proc, "sys/kernel/osrelease"))
	if f.KernelVersion == "" {
		var u unix.Utsname
		if unix.Uname(&u) == nil {
			f.KernelVersion = unix.ByteSliceToString(u.Release[:])
		}
	}
	f.OSImage = h.osImage()
	f.HugePages = h.hugePages()
	return f, nil
}

// Stats measures memory, the two filesystems and the PID count now.
// imageFsPath may equal fsPath (one disk), as on most nodes.
func (h *Host) Stats(fsPath, imageFsPath string) (Stats, error) {
	var s Stats
	var err error
	if s.MemoryCapacity, s.MemoryAvailable, err = h.memory(); err != nil {
		return s, err
	}
	if s.Fs, err = Statfs(fsPath); err != nil {
		return s, err
	}
	if imageFsPath == "" || imageFsPath == fsPath {
		s.ImageFs = s.Fs
	} else if s.ImageFs, err = Statfs(imageFsPath); err != nil {
		return s, err
	}
	s.PIDMax, s.PIDs = h.pids()
	return s, nil
}

// Statfs reports a filesystem's size and inodes as an unprivileged user sees them.
func Statfs(path string) (FsStats, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return FsStats{}, fmt.Errorf("statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize) //nolint:gosec // block size is positive
	return FsStats{
		Path:      path,
		Capacity:  st.Blocks * bs,
		Available: st.Bavail * bs,
		Inodes:    st.Files,
		InodeFree: st.Ffree,
	}, nil
}

// memory reads MemTotal and the memory available (MemAvailable, or on
// kernels before 3.14 MemFree+Buffers+Cached) from meminfo, in bytes.
func (h *Host) memory() (total, available int64, err error) {
	fs, err := procfs.NewFS(h.Proc)
	if err != nil {
		return 0, 0, fmt.Errorf("meminfo: %w", err)
	}
	mi, err := fs.Meminfo()
	if err != nil {
		return 0, 0, fmt.Errorf("meminfo: %w", err)
	}
	if mi.MemTotalBytes == nil || *mi.MemTotalBytes == 0 {
		return 0, 0, errors.New("meminfo: no MemTotal")
	}
	total = toInt64(mi.MemTotalBytes)
	if mi.MemAvailableBytes != nil {
		return total, toInt64(mi.MemAvailableBytes), nil
	}
	return total, toInt64(mi.MemFreeBytes) + toInt64(mi.BuffersBytes) + toInt64(mi.CachedBytes), nil
}

// toInt64 is a meminfo value in bytes, 0 when the line is missing.
func toInt64(v *uint64) int64 {
	if v == nil {
		return 0
	}
	return int64(*v) //nolint:gosec // memory sizes fit in int64
}

func (h *Host) firstLine(paths ...string) string {
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		line, _, _ := strings.Cut(string(data), "\n")
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// osImage is PRETTY_NAME from os-release, as the kubelet (via cadvisor) reports it.
func (h *Host) osImage() string {
	for _, p := range []string{filepath.Join(h.Etc, "os-release"), filepath.Join(h.Etc, "../usr/lib/os-release")} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				return strings.Trim(v, `"'`)
			}
		}
	}
	return "Linux"
}

// hugePages reads /sys/kernel/mm/hugepages/hugepages-<size>kB/nr_hugepages.
func (h *Host) hugePages() map[int64]int64 {
	dir := filepath.Join(h.Sys, "kernel/mm/hugepages")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[int64]int64{}
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(s, "kB"), 10, 64)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(h.firstLine(filepath.Join(dir, e.Name(), "nr_hugepages")), 10, 64)
		if err != nil {
			continue
		}
		out[kb*1024] = n * kb * 1024
	}
	return out
}

// pids returns the PID limit and the number of tasks, as the kubelet's
// pidlimit package measures them (pid_max capped by threads-max, and the
// kernel's own task count from loadavg).
func (h *Host) pids() (limit, running int64) {
	if fs, err := procfs.NewFS(h.Proc); err == nil {
		limit, _ = procinfo.TaskLimit(fs)
	}
	running, _ = procinfo.TaskCount(h.Proc)
	return limit, running
}
