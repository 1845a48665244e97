package volumes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Mount propagation (volumeMounts[].mountPropagation HostToContainer and
// Bidirectional) needs the volume's host path on a shared mount: the
// runtime refuses to share or receive mounts through a private one (Docker:
// "is mounted on / but it is not a shared mount"). The kubelet makes its
// whole root dir a shared mount at start; podsyncd does it per pod, for the
// pods that ask for propagation, on their volumes dir (a recursive bind of
// itself, made rshared, unless the mount it is on is shared already), so
// on a host whose mounts are private no mount of podsyncd outlives its pod:
// Cleanup detaches it with the pod's volumes.

// volumesDir is where a pod's volumes live.
func (m *Manager) volumesDir(uid types.UID) string { return filepath.Join(m.PodDir(uid), "volumes") }

// needsPropagation says whether a container of the pod mounts a volume
// with propagation.
func needsPropagation(pod *corev1.Pod) bool {
	propagates := func(vms []corev1.VolumeMount) bool {
		return slices.ContainsFunc(vms, func(vm corev1.VolumeMount) bool {
			return vm.MountPropagation != nil && (*vm.MountPropagation == corev1.MountPropagationHostToContainer ||
				*vm.MountPropagation == corev1.MountPropagationBidirectional)
		})
	}
	for i := range pod.Spec.InitContainers {
		if propagates(pod.Spec.InitContainers[i].VolumeMounts) {
			return true
		}
	}
	for i := range pod.Spec.Containers {
		if propagates(pod.Spec.Containers[i].VolumeMounts) {
			return true
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if propagates(pod.Spec.EphemeralContainers[i].VolumeMounts) {
			return true
		}
	}
	return false
}

// makeShared makes dir (created when missing) a shared mount unless the
// mount it is on is shared already.
func makeShared(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	shared, err := onSharedMount(dir)
	if err != nil {
		return err
	}
	if shared {
		return nil
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on itself for mount propagation: %w", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount for mount propagation: %w", dir, err)
	}
	return nil
}

// onSharedMount says whether the mount dir is on (the deepest mount point
// at or above it) is in a peer group.
func onSharedMount(dir string) (bool, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.ParentsFilter(dir))
	if err != nil {
		return false, fmt.Errorf("read the mounts above %s: %w", dir, err)
	}
	var deepest *mountinfo.Info
	for _, mi := range mounts {
		// The last of equal mount points is the one on top.
		if deepest == nil || len(mi.Mountpoint) >= len(deepest.Mountpoint) {
			deepest = mi
		}
	}
	if deepest == nil {
		return false, nil
	}
	return slices.ContainsFunc(strings.Fields(deepest.Optional), func(f string) bool { return strings.HasPrefix(f, "shared:") }), nil
}

// unshare detaches the pod's volumes dir when makeShared bound it (with
// whatever the pod's containers propagated into it).
func (m *Manager) unshare(uid types.UID) error {
	dir := m.volumesDir(uid)
	mounted, err := mountinfo.Mounted(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && !mounted {
		return nil
	}
	if err != nil {
		return fmt.Errorf("is %s mounted: %w", dir, err)
	}
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the shared volumes dir %s: %w", dir, err)
	}
	return nil
}
