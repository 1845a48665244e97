package volumes

import (
	"context"
	"os"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
)

// TestPropagationSharesTheVolumesDir: a pod that mounts a volume with
// propagation gets its volumes dir on a shared mount (here a bind of its
// own, the test's temp dir being on a private mount or a shared one), set
// up again without a second bind, and Cleanup leaves no mount behind; a
// pod without propagation gets no mount.
func TestPropagationSharesTheVolumesDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	m := New(dir, nil, nil)
	mk := func(uid string, p *corev1.MountPropagationMode) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: k8stypes.UID("u-" + uid)},
			Spec: corev1.PodSpec{
				Volumes: []corev1.Volume{{Name: "mnt", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				InitContainers: []corev1.Container{{Name: "c", VolumeMounts: []corev1.VolumeMount{
					{Name: "mnt", MountPath: "/mnt", MountPropagation: p}}}},
			}}
	}
	ctx := context.Background()
	mountsUnder := func() int {
		ms, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		if err != nil {
			t.Fatal(err)
		}
		return len(ms)
	}
	t.Cleanup(func() {
		ms, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
		for _, mi := range ms {
			_ = unix.Unmount(mi.Mountpoint, unix.MNT_DETACH)
		}
	})
	before := mountsUnder()

	plain := mk("plain", nil)
	if err := m.Setup(ctx, plain, envvars.Info{}); err != nil {
		t.Fatal(err)
	}
	if n := mountsUnder(); n != before {
		t.Errorf("a pod without propagation made %d mounts", n-before)
	}

	bidi := mk("bidi", ptr.To(corev1.MountPropagationBidirectional))
	for range 2 {
		if err := m.Setup(ctx, bidi, envvars.Info{}); err != nil {
			t.Fatal(err)
		}
	}
	shared, err := onSharedMount(m.Paths(bidi.UID)["mnt"].Path)
	if err != nil {
		t.Fatal(err)
	}
	if !shared {
		t.Error("the emptyDir of a pod with Bidirectional propagation is not on a shared mount")
	}
	if n := mountsUnder() - before; n > 1 {
		t.Errorf("two setups made %d mounts, want at most 1", n)
	}
	if err := m.Cleanup(bidi.UID); err != nil {
		t.Fatal(err)
	}
	if n := mountsUnder(); n != before {
		t.Errorf("%d mounts left after Cleanup", n-before)
	}
	if _, err := os.Stat(m.PodDir(bidi.UID)); !os.IsNotExist(err) {
		t.Errorf("pod dir after Cleanup: %v", err)
	}
}
