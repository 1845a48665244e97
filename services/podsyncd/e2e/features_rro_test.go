package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestRecursiveReadOnlyMounts follows volumeMounts[].recursiveReadOnly end
// to end on the real stack: runtime-shim says in its Status whether this
// host's Docker makes recursive read-only mounts, nodestatusd puts that on
// the Node (status.runtimeHandlers), and podsyncd resolves each mount
// against it as the kubelet does. Where the runtime has none (Docker
// before Engine 25), Enabled leaves the container waiting with
// CreateContainerConfigError and the kubelet's message and event, and the
// other modes give plain read-only mounts (a tmpfs a privileged init
// container mounted into the volume, through Bidirectional propagation,
// stays writable below them); where it has them, Enabled and IfPossible
// make the tmpfs read-only too. containerStatuses[].volumeMounts say which.
func TestRecursiveReadOnlyMounts(t *testing.T) {
	s := startStack(t)
	dataDir := filepath.Join(filepath.Dir(s.runDir), "data")
	t.Cleanup(func() { unmountUnder(dataDir) })

	st := s.runtimeStatus()
	var supported *bool
	for _, h := range st.RuntimeHandlers {
		if h.Name == "" {
			supported = ptr.To(h.GetFeatures().GetRecursiveReadOnlyMounts())
		}
	}
	if supported == nil {
		t.Fatalf("the runtime lists no default handler: %v", st.RuntimeHandlers)
	}
	t.Logf("runtime makes recursive read-only mounts: %v", *supported)

	t.Run("the Node lists the runtime's default handler and its features", func(t *testing.T) {
		s.t = t
		s.Eventually("Node status.runtimeHandlers", 2*time.Minute, func() (bool, string) {
			n, err := s.admin.CoreV1().Nodes().Get(context.Background(), s.node, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			hs := n.Status.RuntimeHandlers
			i := slices.IndexFunc(hs, func(h corev1.NodeRuntimeHandler) bool { return h.Name == "" })
			if i < 0 || hs[i].Features == nil || hs[i].Features.RecursiveReadOnlyMounts == nil ||
				*hs[i].Features.RecursiveReadOnlyMounts != *supported || hs[i].Features.UserNamespaces == nil || *hs[i].Features.UserNamespaces {
				return false, fmt.Sprintf("runtimeHandlers = %s", describeHandlers(hs))
			}
			return true, ""
		})
	})

	t.Run("Enabled", func(t *testing.T) {
		s.t = t
		p := s.Pod("rro-enabled", corev1.RestartPolicyNever, "echo ok")
		p.Spec.Volumes = []corev1.Volume{{Name: "mnt", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mnt", MountPath: "/mnt", ReadOnly: true,
			RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyEnabled)}}
		s.Create(p)
		if *supported {
			got := s.WaitPod("default", p.Name, "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
			wantMounts(t, got.Status.ContainerStatuses[0].VolumeMounts, map[string]*corev1.RecursiveReadOnlyMode{"/mnt": ptr.To(corev1.RecursiveReadOnlyEnabled)})
			s.deletePod(p.Name)
			return
		}
		const msg = `failed to resolve recursive read-only mode: volume "mnt" requested recursive read-only mode, but it is not supported by the runtime`
		got := s.WaitPod("default", p.Name, "waiting with CreateContainerConfigError", func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		if w := got.Status.ContainerStatuses[0].State.Waiting; w.Message != msg {
			t.Errorf("waiting message = %q, want %q", w.Message, msg)
		}
		if got.Status.Phase != corev1.PodPending {
			t.Errorf("phase = %s, want Pending", got.Status.Phase)
		}
		// The status still says how the mount would be: not recursive.
		wantMounts(t, got.Status.ContainerStatuses[0].VolumeMounts, map[string]*corev1.RecursiveReadOnlyMode{"/mnt": ptr.To(corev1.RecursiveReadOnlyDisabled)})
		s.waitEvent(t, "default", p.Name, "Failed", "Error: "+msg)
		s.deletePod(p.Name)
	})

	t.Run("IfPossible, Disabled, read-only and read-write mounts over a propagated tmpfs", func(t *testing.T) {
		s.t = t
		p := rroPod(s, *supported)
		s.Create(p)
		got := s.WaitPod("default", p.Name, "Succeeded or Failed", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		})
		if got.Status.Phase != corev1.PodSucceeded {
			t.Fatalf("phase %s: %+v", got.Status.Phase, got.Status.InitContainerStatuses)
		}
		recursive := corev1.RecursiveReadOnlyDisabled
		if *supported {
			recursive = corev1.RecursiveReadOnlyEnabled
		}
		wantMounts(t, got.Status.InitContainerStatuses[1].VolumeMounts, map[string]*corev1.RecursiveReadOnlyMode{
			"/mnt-rro-if-possible": &recursive,
			"/mnt-rro-disabled":    ptr.To(corev1.RecursiveReadOnlyDisabled),
			"/mnt-ro":              ptr.To(corev1.RecursiveReadOnlyDisabled),
			"/mnt-rw":              nil,
		})
		s.deletePod(p.Name)
		// The pod's shared volumes dir goes with the pod.
		s.Eventually("no mount left under the data dir", 3*time.Minute, func() (bool, string) {
			m := mountsUnder(dataDir)
			return len(m) == 0, fmt.Sprintf("still mounted: %v", m)
		})
	})
}

// rroPod mounts a tmpfs into an emptyDir from a privileged init container
// (Bidirectional), then checks from a second one which mounts of the
// volume let it write into that tmpfs: with recursive read-only mounts the
// IfPossible one does not.
func rroPod(s *stack, supported bool) *corev1.Pod {
	p := s.Pod("rro-modes", corev1.RestartPolicyNever, "echo ok")
	p.Spec.Volumes = []corev1.Volume{{Name: "mnt", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	privileged := func(name, script string) corev1.Container {
		return corev1.Container{Name: name, Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{"sh", "-euxc", script},
			SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
			VolumeMounts: []corev1.VolumeMount{{Name: "mnt", MountPath: "/mnt",
				MountPropagation: ptr.To(corev1.MountPropagationBidirectional)}}}
	}
	writable, readOnly := "rro-disabled ro rw", ""
	if supported {
		readOnly = "rro-if-possible"
	} else {
		writable += " rro-if-possible"
	}
	script := "for f in " + writable + "; do touch /mnt-$f/tmpfs/foo; done\n"
	if readOnly != "" {
		script += "for f in " + readOnly + "; do touch /mnt-$f/tmpfs/foo 2>&1 | grep Read-only; done\n"
	}
	p.Spec.InitContainers = []corev1.Container{
		privileged("mount", "mkdir -p /mnt/tmpfs && mount -t tmpfs none /mnt/tmpfs"),
		{Name: "test", Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sh", "-euxc", script},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "mnt", MountPath: "/mnt-rro-if-possible", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyIfPossible)},
				{Name: "mnt", MountPath: "/mnt-rro-disabled", ReadOnly: true, RecursiveReadOnly: ptr.To(corev1.RecursiveReadOnlyDisabled)},
				{Name: "mnt", MountPath: "/mnt-ro", ReadOnly: true},
				{Name: "mnt", MountPath: "/mnt-rw"},
			}},
		privileged("unmount", "umount /mnt/tmpfs"),
	}
	return p
}

// wantMounts checks a status's volumeMounts by path: nil wants no
// recursiveReadOnly (a read-write mount).
func wantMounts(t *testing.T, got []corev1.VolumeMountStatus, want map[string]*corev1.RecursiveReadOnlyMode) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("volumeMounts = %+v, want %d", got, len(want))
	}
	for _, vm := range got {
		w, ok := want[vm.MountPath]
		switch {
		case !ok:
			t.Errorf("unexpected volumeMount status %+v", vm)
		case w == nil && vm.RecursiveReadOnly != nil:
			t.Errorf("%s: recursiveReadOnly = %s, want unset", vm.MountPath, *vm.RecursiveReadOnly)
		case w != nil && (vm.RecursiveReadOnly == nil || *vm.RecursiveReadOnly != *w):
			t.Errorf("%s: recursiveReadOnly = %v, want %s", vm.MountPath, vm.RecursiveReadOnly, *w)
		case vm.ReadOnly != (w != nil):
			t.Errorf("%s: readOnly = %v", vm.MountPath, vm.ReadOnly)
		}
	}
}

func describeHandlers(hs []corev1.NodeRuntimeHandler) string {
	var parts []string
	for _, h := range hs {
		f := "no features"
		if h.Features != nil {
			f = fmt.Sprintf("recursiveReadOnlyMounts=%v userNamespaces=%v", ptr.Deref(h.Features.RecursiveReadOnlyMounts, false), ptr.Deref(h.Features.UserNamespaces, false))
		}
		parts = append(parts, fmt.Sprintf("%q (%s)", h.Name, f))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
