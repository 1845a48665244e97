package podruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crilogs "k8s.io/cri-client/pkg/logs"
	"k8s.io/utils/buffer"
)

// The kubelet's limits on termination messages (pkg/kubelet/container). The
// per-pod budget (12 KiB shared by the pod's containers) is statusd's.
const (
	// MaxTerminationMessageBytes is the most read from a container's
	// terminationMessagePath file: its last 4 KiB.
	MaxTerminationMessageBytes = 4 * 1024
	// MaxTerminationMessageLogBytes is the most taken from the log by
	// FallbackToLogsOnError: the last 2 KiB ...
	MaxTerminationMessageLogBytes = 2 * 1024
	// MaxTerminationMessageLogLines ... of at most the last 80 lines.
	MaxTerminationMessageLogLines = 80
)

// reasonContainerCannotRun is the runtime's reason for a container that never
// started; it has no log to fall back to.
const reasonContainerCannotRun = "ContainerCannotRun"

// terminationMessageMount creates a fresh, empty, world-writable file for
// one container instance under <pod dir>/containers/<name>/ and mounts it at
// the container's terminationMessagePath, so the container can write its
// message whatever user it runs as. nil when the container has no path or
// podsyncd has no pod dir (no data dir configured).
func (m *Manager) terminationMessageMount(pod *corev1.Pod, c *corev1.Container) (*runtimeapi.Mount, error) {
	if c.TerminationMessagePath == "" || m.opts.Volumes == nil {
		return nil, nil
	}
	dir := filepath.Join(m.opts.Volumes.PodDir(pod.UID), "containers", c.Name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("termination message dir of container %s: %w", c.Name, err)
	}
	// Each instance gets its own file: a restarted container starts with an
	// empty message and the previous instance's stays readable.
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, hex.EncodeToString(id[:]))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return nil, fmt.Errorf("termination message file of container %s: %w", c.Name, err)
	}
	_ = f.Close()
	// The umask narrowed the mode at creation; a non-root user must write it.
	if err := os.Chmod(path, 0o666); err != nil {
		return nil, fmt.Errorf("termination message file of container %s: %w", c.Name, err)
	}
	return &runtimeapi.Mount{HostPath: path, ContainerPath: absContainerPath(c.TerminationMessagePath)}, nil
}

// absContainerPath makes a container path absolute, as the kubelet does
// before mounting (the API already requires an absolute path on Linux).
func absContainerPath(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return "/" + p
}

// terminationMessage is what the kubelet appends to an exited container's
// message: the end of the file mounted at its terminationMessagePath, or,
// with FallbackToLogsOnError, a failed container whose file is empty or
// missing, the end of its log.
func terminationMessage(ctx context.Context, s *runtimeapi.ContainerStatus) string {
	path := s.Annotations[AnnotationTermPath]
	fallback := corev1.TerminationMessagePolicy(s.Annotations[AnnotationPolicy]) == corev1.TerminationMessageFallbackToLogsOnError &&
		s.ExitCode != 0 && s.Reason != reasonContainerCannotRun
	msg, readLogs := terminationMessageFile(s.Mounts, path, fallback)
	if readLogs {
		msg = logTail(ctx, s.LogPath)
	}
	return msg
}

// terminationMessageFile reads the message file mounted at path (the last
// MaxTerminationMessageBytes of it); readLogs says the log must be read
// instead.
func terminationMessageFile(mounts []*runtimeapi.Mount, path string, fallback bool) (msg string, readLogs bool) {
	if path == "" {
		return "", fallback
	}
	path = absContainerPath(path)
	for _, mnt := range mounts {
		if mnt.ContainerPath != path {
			continue
		}
		data, err := readTail(mnt.HostPath, MaxTerminationMessageBytes)
		if err != nil {
			if os.IsNotExist(err) {
				return "", fallback
			}
			return fmt.Sprintf("Error on reading termination log %s: %v", mnt.HostPath, err), false
		}
		return string(data), fallback && len(data) == 0
	}
	return "", fallback
}

// readTail returns the last max bytes of the file at path.
func readTail(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if size := fi.Size(); size > max {
		if _, err := f.Seek(size-max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// logTail is the end of a CRI-format container log: its last
// MaxTerminationMessageLogLines lines, of which at most the last
// MaxTerminationMessageLogBytes bytes, stdout and stderr interleaved as
// written.
func logTail(ctx context.Context, path string) string {
	if path == "" {
		return "Error on reading termination message from logs: the runtime reports no log path"
	}
	ring, err := buffer.NewTypedRingFixed[byte](MaxTerminationMessageLogBytes)
	if err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	lines := int64(MaxTerminationMessageLogLines)
	// Without Follow the runtime service is never asked anything.
	if err := crilogs.ReadLogs(ctx, path, "", &crilogs.LogOptions{TailLines: &lines}, nil, ring, ring); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return string(ring.Slice())
}
