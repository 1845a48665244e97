package volumes

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// Permission bits fsGroup ownership adds (upstream's SetVolumeOwnership):
// group read/write, group read only for read-only volumes, and group
// search on directories.
const (
	rwMask   = fs.FileMode(0o660)
	roMask   = fs.FileMode(0o440)
	execMask = fs.FileMode(0o110)
)

// SetOwnership gives everything under dir the group fsGroup and the group
// permissions the pod needs to use it, as the kubelet does for volumes that
// support ownership management: every entry is chowned to the group
// (symlinks themselves, never their targets), files gain group read (and
// write unless readOnly), directories also group search and the setgid bit
// so that new files inherit the group. With the OnRootMismatch policy the
// walk is skipped when the root already has the group, the permissions and
// the setgid bit.
func SetOwnership(dir string, fsGroup int64, readOnly bool, policy *corev1.PodFSGroupChangePolicy) error {
	if policy != nil && *policy == corev1.FSGroupChangeOnRootMismatch && !rootNeedsChange(dir, fsGroup, readOnly) {
		return nil
	}
	return filepath.Walk(dir, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return changeOne(p, info, fsGroup, readOnly)
	})
}

func changeOne(p string, info fs.FileInfo, fsGroup int64, readOnly bool) error {
	if err := os.Lchown(p, -1, int(fsGroup)); err != nil {
		return fmt.Errorf("set group %d on %s: %w", fsGroup, p, err)
	}
	// A symlink's own mode means nothing, and chmod would change its target.
	if info.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	mask := rwMask
	if readOnly {
		mask = roMask
	}
	if info.IsDir() {
		mask |= fs.ModeSetgid | execMask
	}
	mode := info.Mode().Perm() | info.Mode()&(fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky)
	if err := os.Chmod(p, mode|mask); err != nil {
		return fmt.Errorf("set mode on %s: %w", p, err)
	}
	return nil
}

// rootNeedsChange is the OnRootMismatch test: the root's group, its group
// permissions and its setgid bit.
func rootNeedsChange(dir string, fsGroup int64, readOnly bool) bool {
	fi, err := os.Stat(dir)
	if err != nil || !fi.IsDir() {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int64(st.Gid) != fsGroup {
		return true
	}
	want := rwMask
	if readOnly {
		want = roMask
	}
	want |= execMask
	return fi.Mode().Perm()&want != want || fi.Mode()&fs.ModeSetgid == 0
}

// fsGroupOf is the pod's fsGroup, nil without one.
func fsGroupOf(pod *corev1.Pod) *int64 {
	if sc := pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}
