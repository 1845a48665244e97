package containerlogs

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/config"
)

// The kubelet's defaults (KubeletConfiguration containerLogMaxSize,
// containerLogMaxFiles, containerLogMaxWorkers, containerLogMonitorInterval).
const (
	DefaultMaxSize         = 10 << 20
	DefaultMaxFiles        = 5
	DefaultWorkers         = 1
	DefaultMonitorInterval = 10 * time.Second
)

const (
	// rotatedTimeFormat is the suffix of a rotated file: <log>.<timestamp>.
	rotatedTimeFormat = "20060102-150405"
	gzSuffix          = ".gz"
	tmpSuffix         = ".tmp"
)

// Policy bounds a container's log files.
type Policy struct {
	// MaxSize is the size in bytes at which the current file is rotated;
	// negative turns rotation off.
	MaxSize int64
	// MaxFiles is how many files (current and rotated) a container keeps; at
	// least 2.
	MaxFiles int
	// Workers rotate that many containers at once (at least 1).
	Workers int
}

// Validate names every setting that cannot work, by its config key.
func (p Policy) Validate() field.ErrorList {
	var errs field.ErrorList
	if p.MaxFiles <= 1 {
		errs = append(errs, field.Invalid(field.NewPath("container_log_max_files"), p.MaxFiles, "must be greater than 1"))
	}
	return append(errs, config.Positive(field.NewPath("container_log_max_workers"), p.Workers)...)
}

// Rotator rotates the logs of running containers.
type Rotator struct {
	rt     criapi.ContainerManager
	policy Policy
	log    *slog.Logger
	clock  clock.Clock
	mu     sync.Mutex // one pass at a time
}

// NewRotator returns a rotator over the CRI runtime rt.
func NewRotator(rt criapi.ContainerManager, policy Policy, log *slog.Logger, clk clock.Clock) *Rotator {
	if policy.Workers < 1 {
		policy.Workers = 1
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Rotator{rt: rt, policy: policy, log: log, clock: clk}
}

// Run checks every running container's log each interval until ctx ends.
func (r *Rotator) Run(ctx context.Context, interval time.Duration) {
	if r.policy.MaxSize < 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := r.RotateAll(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("container log rotation", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// RotateAll makes one pass over the running containers, rotating every log
// that reached the size limit.
func (r *Rotator) RotateAll(ctx context.Context) error {
	if r.policy.MaxSize < 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	containers, err := r.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	ids := make(chan string)
	var wg sync.WaitGroup
	for range min(r.policy.Workers, max(len(containers), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				if err := r.check(ctx, id); err != nil {
					r.log.Warn("rotate container log", "container", id, "err", err)
				}
			}
		}()
	}
	for _, c := range containers {
		// A container that is not running writes nothing more.
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			ids <- c.Id
		}
	}
	close(ids)
	wg.Wait()
	return nil
}

// check rotates one container's log when it reached the size limit.
func (r *Rotator) check(ctx context.Context, id string) error {
	resp, err := r.rt.ContainerStatus(ctx, id, false)
	if err != nil {
		return fmt.Errorf("container status: %w", err)
	}
	path := resp.GetStatus().GetLogPath()
	if path == "" {
		return nil
	}
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		// A rotation was cut short: ask the runtime for the file again.
		if err := r.rt.ReopenContainerLog(ctx, id); err != nil {
			return fmt.Errorf("log %s missing and reopen failed: %w", path, err)
		}
		if info, err = os.Stat(path); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if info.Size() < r.policy.MaxSize {
		return nil
	}
	return r.rotate(ctx, id, path)
}

// rotate drops leftovers of failed rotations and the oldest rotated files,
// compresses the remaining plain ones, then renames the current file and
// has the runtime reopen it.
func (r *Rotator) rotate(ctx context.Context, id, path string) error {
	files, err := filepath.Glob(globEscape(path) + ".*")
	if err != nil {
		return err
	}
	var keep []string
	for _, f := range classify(files) {
		if f.unused {
			if err := os.Remove(f.name); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			continue
		}
		keep = append(keep, f.name)
	}
	// The timestamp suffixes sort oldest first. Besides the file being
	// rotated now and the new current one, MaxFiles-2 rotated files stay.
	sort.Strings(keep)
	excess := len(keep) - max(r.policy.MaxFiles-2, 0)
	for i := 0; i < excess; i++ {
		if err := os.Remove(keep[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	keep = keep[max(excess, 0):]
	for _, f := range keep {
		if !strings.HasSuffix(f, gzSuffix) {
			if err := compress(f); err != nil {
				return err
			}
		}
	}
	rotated := path + "." + r.clock.Now().Format(rotatedTimeFormat)
	if err := os.Rename(path, rotated); err != nil {
		return err
	}
	if err := r.rt.ReopenContainerLog(ctx, id); err != nil {
		// Put it back so the next pass can try again.
		if rerr := os.Rename(rotated, path); rerr != nil {
			r.log.Error("could not restore a rotated log; its lines stay in the rotated file", "file", rotated, "err", rerr)
		}
		return fmt.Errorf("reopen log: %w", err)
	}
	r.log.Debug("rotated container log", "container", id, "file", rotated)
	return nil
}

type logFile struct {
	name   string
	unused bool
}

// classify sorts out the files beside a log: temporary files of an
// interrupted compression, and plain files whose .gz already exists, are
// unused leftovers.
func classify(files []string) []logFile {
	have := make(map[string]bool, len(files))
	for _, f := range files {
		have[f] = true
	}
	out := make([]logFile, 0, len(files))
	for _, f := range files {
		unused := strings.HasSuffix(f, tmpSuffix) ||
			(!strings.HasSuffix(f, gzSuffix) && have[f+gzSuffix])
		out = append(out, logFile{name: f, unused: unused})
	}
	return out
}

// compress replaces file with file.gz, written through a temporary file so
// a crash never leaves a truncated archive under the final name.
func compress(file string) error {
	in, err := os.Open(file)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	tmp := file + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	zw := gzip.NewWriter(out)
	_, err = io.Copy(zw, in)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("compress %s: %w", file, err)
	}
	if err := os.Rename(tmp, file+gzSuffix); err != nil {
		return err
	}
	return os.Remove(file)
}
