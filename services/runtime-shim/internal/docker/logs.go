package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/microlet/microlet/services/runtime-shim/internal/crilog"
)

// Docker's copy of a container's output: json-file, rotated by Docker at
// Options.LogMaxSize into at most Options.LogMaxFiles files, uncompressed so
// the copier can read a rotated file. These override the daemon's log-opts,
// which may compress or not rotate at all. The copier reads Docker's files
// directly (crilog.Copier) and holds the file it reads open, so it loses
// lines only when it falls behind by all of Docker's files: a shim stopped
// while the container wrote more than max size x max files.
const (
	DefaultLogMaxSize  = "10m"
	DefaultLogMaxFiles = 5
)

func (b *Backend) containerLogConfig() container.LogConfig {
	return container.LogConfig{Type: "json-file", Config: map[string]string{
		"max-size": b.opts.LogMaxSize, "max-file": strconv.Itoa(b.opts.LogMaxFiles), "compress": "false",
	}}
}

// posPath is where the copier of container id records its position.
func (b *Backend) posPath(id string) string {
	return filepath.Join(b.opts.DataDir, "logs", id+".pos")
}

// startFollower copies the container's Docker log (json-file, at jsonPath)
// into the CRI log file at path until the container stops and its output is
// copied, resuming at the recorded position after a shim restart.
func (b *Backend) startFollower(id, path, jsonPath string) error {
	if jsonPath == "" {
		return errors.New("docker reports no log path (json-file driver expected)")
	}
	b.mu.Lock()
	old := b.logs[id]
	b.mu.Unlock()
	if old != nil {
		return nil
	}
	file, err := crilog.Open(path)
	if err != nil {
		return err
	}
	cp, err := crilog.NewCopier(file, jsonPath, b.posPath(id), b.log.With("container", id))
	if err != nil {
		_ = file.Close()
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{copier: cp, cancel: cancel, done: make(chan struct{})}
	b.mu.Lock()
	if old := b.logs[id]; old != nil {
		b.mu.Unlock()
		cancel()
		_ = cp.Close()
		_ = file.Close()
		return nil
	}
	b.logs[id] = f
	b.mu.Unlock()
	exited := make(chan struct{})
	go func() {
		// Docker has written the container's last line when it reports the
		// container stopped. A failed wait (Docker restarting) is retried:
		// closing exited early would end the copy of a running container.
		defer close(exited)
		for ctx.Err() == nil {
			res := b.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
			select {
			case <-res.Result:
				return
			case err := <-res.Error:
				if cerrdefs.IsNotFound(err) {
					return
				}
				if ctx.Err() == nil {
					b.log.Warn("CRI log follower: wait", "container", id, "err", err)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	go func() {
		defer close(f.done)
		defer file.Close()
		defer cp.Close()
		if err := cp.Run(ctx, exited); err != nil && ctx.Err() == nil {
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

// dropFollower stops and forgets the follower of a removed container and
// removes its recorded position.
func (b *Backend) dropFollower(id string) {
	b.mu.Lock()
	f := b.logs[id]
	delete(b.logs, id)
	b.mu.Unlock()
	if f != nil {
		f.stop()
	}
	if err := os.Remove(b.posPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		b.log.Warn("remove CRI log position", "container", id, "err", err)
	}
}

// resumeLogs restarts the followers of started containers after a shim
// restart; each resumes at its recorded position.
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
		if _, err := os.Stat(filepath.Dir(path)); err != nil {
			// The caller removed the log directory (the pod is going away):
			// do not create it again.
			b.log.Debug("resume CRI log: log directory gone", "container", c.ID, "path", path)
			continue
		}
		ins, err := b.cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil {
			b.log.Warn("resume CRI log: inspect", "container", c.ID, "err", err)
			continue
		}
		if err := b.startFollower(c.ID, path, ins.Container.LogPath); err != nil {
			b.log.Warn("resume CRI log", "container", c.ID, "err", fmt.Sprint(err))
		}
	}
}
