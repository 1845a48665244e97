package containerlogs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// DefaultSymlinkDir is where the kubelet links every container's log.
const DefaultSymlinkDir = "/var/log/containers"

const (
	// symlinkSuffix ends every symlink's name.
	symlinkSuffix = ".log"
	// maxNameLen is the longest file name ext4 allows; longer symlink
	// names are cut, as the kubelet cuts them.
	maxNameLen = 255
)

// SymlinkPath is the symlink of a container's log in dir:
// <pod>_<namespace>_<container>-<id>.log, cut to 255 characters.
func SymlinkPath(dir, podName, podNamespace, containerName, containerID string) string {
	name := fmt.Sprintf("%s_%s_%s-%s", podName, podNamespace, containerName, containerID)
	if len(name) > maxNameLen-len(symlinkSuffix) {
		name = name[:maxNameLen-len(symlinkSuffix)]
	}
	return filepath.Join(dir, name+symlinkSuffix)
}

// containerIDFromSymlink is the container ID a symlink name ends with (after
// the last '-'); "" when the name has no plausible ID.
func containerIDFromSymlink(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), symlinkSuffix)
	i := strings.LastIndexByte(base, '-')
	if i < 0 || len(base)-i-1 < 6 {
		return ""
	}
	return base[i+1:]
}

// Link makes the symlink of a container's log in dir (created when
// missing). Nothing is linked when dir is empty or the log file does not
// exist (a runtime logging elsewhere would leave a dangling link).
func Link(dir, podName, podNamespace, containerName, containerID, logPath string) error {
	if dir == "" || logPath == "" {
		return nil
	}
	if _, err := os.Stat(logPath); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("container log symlink dir: %w", err)
	}
	link := SymlinkPath(dir, podName, podNamespace, containerName, containerID)
	if err := os.Symlink(logPath, link); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("link container log %s: %w", link, err)
	}
	return nil
}

// Remove deletes a container's log files (the current one and every rotated
// or compressed one beside it) and its symlink in symlinkDir, as the kubelet
// does before removing a container. A container the runtime no longer knows
// has nothing left to find; that is not an error.
func Remove(ctx context.Context, rt criapi.ContainerManager, symlinkDir, containerID string) error {
	resp, err := rt.ContainerStatus(ctx, containerID, false)
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("status of container %s: %w", containerID, err)
	}
	st := resp.GetStatus()
	if st == nil {
		return nil
	}
	if p := st.GetLogPath(); p != "" {
		files, _ := filepath.Glob(globEscape(p) + "*")
		for _, f := range files {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove log of container %s: %w", containerID, err)
			}
		}
	}
	if symlinkDir != "" {
		l := st.GetLabels()
		link := SymlinkPath(symlinkDir, l[kubelettypes.KubernetesPodNameLabel], l[kubelettypes.KubernetesPodNamespaceLabel], l[kubelettypes.KubernetesContainerNameLabel], containerID)
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove log symlink of container %s: %w", containerID, err)
		}
	}
	return nil
}

// RemoveDanglingSymlinks removes symlinks in dir whose log file is gone and
// whose container has exited or no longer exists. A running container's
// link stays: its file is missing only for the moment of a rotation.
func RemoveDanglingSymlinks(ctx context.Context, rt criapi.ContainerManager, dir string) error {
	if dir == "" {
		return nil
	}
	links, err := filepath.Glob(filepath.Join(globEscape(dir), "*"+symlinkSuffix))
	if err != nil {
		return err
	}
	var errs []error
	for _, link := range links {
		if _, err := os.Stat(link); !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if id := containerIDFromSymlink(link); id != "" {
			resp, err := rt.ContainerStatus(ctx, id, false)
			if err == nil && resp.GetStatus() != nil && resp.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
				continue
			}
		}
		if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// globEscape quotes the glob metacharacters of a literal path.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		switch r {
		case '*', '?', '[', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
