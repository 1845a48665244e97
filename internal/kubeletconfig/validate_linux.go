package kubeletconfig

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// cgroupV1 reports whether the host mounts cgroup v1 (not the unified v2
// hierarchy) at /sys/fs/cgroup. A variable so tests can pretend.
var cgroupV1 = func() bool {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return false
	}
	return st.Type != unix.CGROUP2_SUPER_MAGIC
}

// validateOS is the kubelet's Linux-only validation: it refuses a cgroup v1
// host unless failCgroupV1 is false, and checks userNamespaces.idsPerPod.
// Like the kubelet it reports the first problem only.
func validateOS(kc *kubeletv1beta1.KubeletConfiguration) error {
	const unit = 65536
	v1 := cgroupV1()
	if kc.FailCgroupV1 != nil && *kc.FailCgroupV1 && v1 {
		return fmt.Errorf("kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is unsupported and will be removed in a future release")
	}
	if v1 && kc.SingleProcessOOMKill != nil && !*kc.SingleProcessOOMKill {
		return fmt.Errorf("invalid configuration: singleProcessOOMKill must not be explicitly set to false when using cgroup v1")
	}
	if kc.UserNamespaces != nil && kc.UserNamespaces.IDsPerPod != nil {
		n := *kc.UserNamespaces.IDsPerPod
		switch {
		case n < unit:
			return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be less than %d", unit)
		case n%unit != 0:
			return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must be a multiple of %d", unit)
		case n > math.MaxUint32:
			return fmt.Errorf("invalid configuration: userNamespaces.idsPerPod must not be more than %d", int64(math.MaxUint32))
		}
	}
	return nil
}
