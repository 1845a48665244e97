package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
	"github.com/microlet/microlet/services/podsyncd/internal/resources"
)

const emptyDirPlugin = "kubernetes.io~empty-dir"

// readyMarker records that an emptyDir was set up (mode and ownership
// applied), as the kubelet's setup marker does: later syncs leave it, and
// what the containers did to it, alone.
func (m *Manager) readyMarker(uid types.UID, name string) string {
	return filepath.Join(m.PodDir(uid), "plugins", emptyDirPlugin, name, "ready")
}

// setupEmptyDir makes the emptyDir once: a 0777 directory (for the Memory
// medium a tmpfs, 1777 as tmpfs makes it) given to the pod's fsGroup.
func (m *Manager) setupEmptyDir(pod *corev1.Pod, v *corev1.Volume, info envvars.Info) (Volume, error) {
	dir := m.volDir(pod, emptyDirPlugin, v.Name)
	marker := m.readyMarker(pod.UID, v.Name)
	memory := v.EmptyDir.Medium == corev1.StorageMediumMemory
	if _, err := os.Stat(marker); err == nil && (!memory || isMountPoint(dir)) {
		return Volume{Path: dir}, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return Volume{}, err
	}
	switch v.EmptyDir.Medium {
	case corev1.StorageMediumDefault:
	case corev1.StorageMediumMemory:
		if !isMountPoint(dir) {
			if err := mountTmpfs(dir, memorySize(pod, v.EmptyDir, info.Allocatable)); err != nil {
				return Volume{}, err
			}
		}
	default:
		return Volume{}, fmt.Errorf("emptyDir medium %q is not supported by this node (only \"\" and Memory)", v.EmptyDir.Medium)
	}
	// A tmpfs root keeps tmpfs's own 1777, as the kubelet (which mounts it
	// without a mode) leaves it; a plain directory is 0777.
	mode := os.FileMode(0o777)
	if memory {
		mode |= os.ModeSticky
	}
	if err := os.Chmod(dir, mode); err != nil {
		return Volume{}, err
	}
	if gid := fsGroupOf(pod); gid != nil {
		if err := SetOwnership(dir, *gid, false, pod.Spec.SecurityContext.FSGroupChangePolicy); err != nil {
			return Volume{}, err
		}
	}
	if err := os.MkdirAll(filepath.Dir(marker), 0o750); err != nil {
		return Volume{}, err
	}
	return Volume{Path: dir}, os.WriteFile(marker, nil, 0o640)
}

// memorySize is the size of a memory-backed emptyDir (upstream's
// calculateEmptyDirMemorySize): the node's allocatable memory, lowered to the
// pod's memory limit and then to the volume's sizeLimit where those are
// smaller; 0 (the kernel's default, half the RAM) when none is known.
func memorySize(pod *corev1.Pod, ed *corev1.EmptyDirVolumeSource, allocatable corev1.ResourceList) int64 {
	size := allocatable.Memory().Value()
	lower := func(v int64) {
		if v > 0 && (size <= 0 || v <= size) {
			size = v
		}
	}
	if limit, ok := resources.PodMemoryLimit(pod); ok {
		lower(limit)
	}
	if ed.SizeLimit != nil {
		lower(ed.SizeLimit.Value())
	}
	return size
}

// mountTmpfs mounts a tmpfs of size bytes (0: the kernel's default) at dir.
func mountTmpfs(dir string, size int64) error {
	opts := "mode=1777"
	if size > 0 {
		opts += fmt.Sprintf(",size=%d", size)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("mount tmpfs (%s) at %s: %w: memory-backed emptyDir needs podsyncd to run with CAP_SYS_ADMIN in the runtime's mount namespace", resource.NewQuantity(size, resource.BinarySI), dir, err)
		}
		return fmt.Errorf("mount tmpfs (%s) at %s: %w", resource.NewQuantity(size, resource.BinarySI), dir, err)
	}
	return nil
}

// isMountPoint says whether dir is on another device than its parent (a
// tmpfs mounted there).
func isMountPoint(dir string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(dir, &st) != nil || syscall.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// unmountEmptyDirs unmounts the pod's memory-backed emptyDirs so that the
// pod dir can be removed.
func (m *Manager) unmountEmptyDirs(uid types.UID) error {
	root := filepath.Join(m.PodDir(uid), "volumes", emptyDirPlugin)
	entries, err := os.ReadDir(root)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if isMountPoint(dir) {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount emptyDir %q at %s: %w", e.Name(), dir, err))
			}
		}
	}
	return errors.Join(errs...)
}
