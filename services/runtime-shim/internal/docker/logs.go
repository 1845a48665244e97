package docker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/microlet/microlet/services/runtime-shim/internal/crilog"
)

// startFollower copies the container's Docker log (json-file) into the CRI
// log file at path, from `since` on, until the container's output ends.
func (b *Backend) startFollower(id, path string, since time.Time) error {
	file, err := crilog.Open(path)
	if err != nil {
		return err
	}
	if since.IsZero() {
		since = file.LastTimestamp()
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{file: file, cancel: cancel, done: make(chan struct{})}
	b.mu.Lock()
	if old := b.logs[id]; old != nil {
		b.mu.Unlock()
		cancel()
		_ = file.Close()
		return nil
	}
	b.logs[id] = f
	b.mu.Unlock()
	go func() {
		defer close(f.done)
		defer file.Close()
		opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true, Timestamps: true}
		if !since.IsZero() {
			// Docker's since has whole-second precision here; the writer
			// drops lines already in the file.
			opts.Since = strconv.FormatInt(since.Unix(), 10)
		}
		rc, err := b.cli.ContainerLogs(ctx, id, opts)
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("CRI log follower", "container", id, "err", err)
			}
			return
		}
		defer rc.Close()
		stdout := crilog.NewDockerWriter(file, crilog.Stdout, since)
		stderr := crilog.NewDockerWriter(file, crilog.Stderr, since)
		_, err = stdcopy.StdCopy(stdout, stderr, rc)
		_ = stdout.Close()
		_ = stderr.Close()
		if err != nil && ctx.Err() == nil {
			b.log.Warn("CRI log follower ended", "container", id, "err", err)
		}
	}()
	return nil
}

// waitFollower waits (at most d) for the container's follower to drain.
func (b *Backend) waitFollower(id string, d time.Duration) {
	b.mu.Lock()
	f := b.logs[id]
	b.mu.Unlock()
	if f != nil {
		f.wait(d)
	}
}

// dropFollower stops and forgets the follower of a removed container.
func (b *Backend) dropFollower(id string) {
	b.mu.Lock()
	f := b.logs[id]
	delete(b.logs, id)
	b.mu.Unlock()
	if f != nil {
		f.stop()
	}
}

// resumeLogs restarts the followers of started containers after a shim
// restart; each resumes after the last line already in its file.
func (b *Backend) resumeLogs(ctx context.Context) {
	cs, err := b.listDocker(ctx, typeContainer)
	if err != nil {
		b.log.Warn("resume CRI logs: list containers", "err", err)
		return
	}
	for _, c := range cs {
		path := c.Labels[LabelLogPath]
		if path == "" || c.State == "created" {
			continue
		}
		if err := b.startFollower(c.ID, path, time.Time{}); err != nil {
			b.log.Warn("resume CRI log", "container", c.ID, "err", fmt.Sprint(err))
		}
	}
}
