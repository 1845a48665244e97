package procinfo

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Usage is one process's CPU time and memory.
type Usage struct {
	// CPUSeconds is user plus system time since the process started.
	CPUSeconds float64
	// RSS is the resident set in bytes, shared pages counted in full.
	RSS uint64
	// PSS is the proportional set in bytes: each shared page divided by
	// the number of processes mapping it, so the PSS of several processes
	// sums to the memory they really occupy together.
	PSS uint64
	// PeakRSS is the largest RSS the process has had (VmHWM), in bytes.
	PeakRSS uint64
}

// Of measures process pid of the host's /proc.
func Of(pid int) (Usage, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return Usage{}, err
	}
	return usage(p)
}

// Self measures the calling process.
func Self() (Usage, error) {
	p, err := procfs.Self()
	if err != nil {
		return Usage{}, err
	}
	return usage(p)
}

func usage(p procfs.Proc) (Usage, error) {
	var u Usage
	st, err := p.Stat()
	if err != nil {
		return u, fmt.Errorf("pid %d: %w", p.PID, err)
	}
	u.CPUSeconds = st.CPUTime()
	// smaps_rollup needs PTRACE_MODE_READ on the process (our own
	// children, or root); without it RSS still comes from status.
	if sm, err := p.ProcSMapsRollup(); err == nil {
		u.RSS, u.PSS = sm.Rss, sm.Pss
	}
	status, err := p.NewStatus()
	if err != nil {
		return u, fmt.Errorf("pid %d: %w", p.PID, err)
	}
	u.PeakRSS = status.VmHWM
	if u.RSS == 0 {
		u.RSS = status.VmRSS
	}
	return u, nil
}

// TaskLimit is the system-wide limit on tasks, the smaller of
// kernel.pid_max and kernel.threads-max, as the kubelet reports MaxPID;
// false when neither can be read.
func TaskLimit(fs procfs.FS) (int64, bool) {
	limit, ok := int64(0), false
	for _, sysctl := range []string{"kernel.pid_max", "kernel.threads-max"} {
		v, err := fs.SysctlInts(sysctl)
		if err != nil || len(v) != 1 || v[0] <= 0 {
			continue
		}
		if n := int64(v[0]); !ok || n < limit {
			limit, ok = n, true
		}
	}
	return limit, ok
}

// TaskCount is the number of tasks (threads included) on the system: the
// denominator of the fourth field of procRoot/loadavg ("0.50 0.40 0.30
// 3/412 9876"). The kubelet reads the same field rather than sysinfo(2),
// whose count is 16 bits wide.
func TaskCount(procRoot string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "loadavg"))
	if err != nil {
		return 0, err
	}
	return ParseLoadavgTasks(b)
}

// ParseLoadavgTasks returns the task count of /proc/loadavg's content.
func ParseLoadavgTasks(b []byte) (int64, error) {
	f := strings.Fields(string(b))
	if len(f) < 5 {
		return 0, fmt.Errorf("loadavg: %d fields, want 5", len(f))
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, fmt.Errorf("loadavg: fourth field %q is not running/total", f[3])
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("loadavg: task count %q is not a count", total)
	}
	return n, nil
}
