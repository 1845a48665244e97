package main

import (
	"fmt"

	"github.com/prometheus/procfs"

	"github.com/microlet/microlet/internal/procinfo"
)

// cpuSeconds is the process's user+system CPU time.
func cpuSeconds(pid int) (float64, error) {
	u, err := procinfo.Of(pid)
	return u.CPUSeconds, err
}

// memory is the process's resident set and its peak, in bytes.
func memory(pid int) (rss, peak int64, err error) {
	u, err := procinfo.Of(pid)
	return int64(u.RSS), int64(u.PeakRSS), err //nolint:gosec // memory sizes fit in int64
}

// loadAvg is the 1, 5 and 15 minute load average, as uptime prints it.
func loadAvg() string {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return "?"
	}
	l, err := fs.LoadAvg()
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", l.Load1, l.Load5, l.Load15)
}
