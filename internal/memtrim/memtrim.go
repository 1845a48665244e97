package memtrim

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Disable, set in the environment to any value, leaves the memory alone
// (to measure what the trimming saves).
const Disable = "MICROLET_NO_MEMTRIM"

// Delay is how long after start-up (a service's Ready, the supervisor's
// "all services serving") a process trims: the first lists, syncs and
// connections are over by then.
const Delay = 30 * time.Second

// AfterStartup trims once Delay has passed, unless ctx ends first or
// Disable is set; it returns at once and does the work in a goroutine.
func AfterStartup(ctx context.Context, log *slog.Logger) {
	if os.Getenv(Disable) != "" {
		return
	}
	go func() {
		t := time.NewTimer(Delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := Trim()
		if err != nil {
			log.Debug("memory trim incomplete", "err", err)
		}
		log.Debug("memory trimmed after start-up", "executable_bytes_paged_out", n)
	}()
}

// Trim returns the free heap to the OS and pages out the executable's
// read-only mappings; it reports the bytes of mappings it advised.
func Trim() (uint64, error) {
	debug.FreeOSMemory()
	self, err := procfs.Self()
	if err != nil {
		return 0, err
	}
	exe, err := self.Executable()
	if err != nil {
		return 0, err
	}
	maps, err := self.ProcMaps()
	if err != nil {
		return 0, err
	}
	var n uint64
	var errs []error
	for _, m := range maps {
		// Only clean file pages: writable mappings (.data, .bss) hold state.
		if m.Pathname != exe || m.Perms == nil || m.Perms.Write || m.EndAddr <= m.StartAddr {
			continue
		}
		// The raw call takes the address as a number: the region is this
		// process's own mapping, never memory the Go heap manages.
		size := m.EndAddr - m.StartAddr
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, m.StartAddr, size, unix.MADV_PAGEOUT); e != 0 {
			errs = append(errs, e)
			continue
		}
		n += uint64(size)
	}
	return n, errors.Join(errs...)
}
