package volumes

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
)

const testGroup = 4321

func owner(t *testing.T, p string) (gid uint32, mode fs.FileMode) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Gid, fi.Mode()
}

func needRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "changing a file's group to an arbitrary group")
}

func TestSetOwnership(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name               string
		readOnly           bool
		fileMode, wantFile fs.FileMode
		wantDir            fs.FileMode
	}{
		{"read-write volume", false, 0o600, 0o660, fs.ModeDir | fs.ModeSetgid | 0o770},
		{"read-only volume", true, 0o400, 0o440, fs.ModeDir | fs.ModeSetgid | 0o750},
		{"wider modes are kept", false, 0o644, 0o664, fs.ModeDir | fs.ModeSetgid | 0o770},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.Chmod(root, 0o700); err != nil {
				t.Fatal(err)
			}
			sub := filepath.Join(root, "sub")
			f := filepath.Join(sub, "f")
			link := filepath.Join(root, "link")
			if err := os.Mkdir(sub, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte("x"), tc.fileMode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(f, tc.fileMode); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("sub/f", link); err != nil {
				t.Fatal(err)
			}
			if err := SetOwnership(root, testGroup, tc.readOnly, nil); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{root, sub, f, link} {
				if gid, _ := owner(t, p); gid != testGroup {
					t.Errorf("%s: group %d, want %d", p, gid, testGroup)
				}
			}
			if _, m := owner(t, f); m != tc.wantFile {
				t.Errorf("file mode %v, want %v", m, tc.wantFile)
			}
			for _, d := range []string{root, sub} {
				if _, m := owner(t, d); m != tc.wantDir {
					t.Errorf("%s: mode %v, want %v", d, m, tc.wantDir)
				}
			}
		})
	}
}

func TestSetOwnershipOnRootMismatch(t *testing.T) {
	needRoot(t)
	policy := corev1.FSGroupChangeOnRootMismatch
	root := t.TempDir()
	f := filepath.Join(root, "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The root does not match yet: everything changes.
	if err := SetOwnership(root, testGroup, false, &policy); err != nil {
		t.Fatal(err)
	}
	if gid, m := owner(t, f); gid != testGroup || m != 0o660 {
		t.Fatalf("first pass: group %d mode %v", gid, m)
	}
	// The root matches: a file put back to root's group is left alone ...
	if err := os.Lchown(f, -1, 0); err != nil {
		t.Fatal(err)
	}
	if err := SetOwnership(root, testGroup, false, &policy); err != nil {
		t.Fatal(err)
	}
	if gid, _ := owner(t, f); gid != 0 {
		t.Fatalf("OnRootMismatch walked a matching root: file group %d", gid)
	}
	// ... while the Always policy (nil) walks again.
	if err := SetOwnership(root, testGroup, false, nil); err != nil {
		t.Fatal(err)
	}
	if gid, _ := owner(t, f); gid != testGroup {
		t.Fatalf("recursive change skipped: file group %d", gid)
	}
}

// TestFSGroupVolumes sets up the volume kinds that support ownership with
// an fsGroup: emptyDir and API-backed volumes get the group, group bits and
// setgid, and an unchanged configMap is not rewritten on the next sync.
func TestFSGroupVolumes(t *testing.T) {
	needRoot(t)
	src := objects{cms: map[string]*corev1.ConfigMap{"cm": {Data: map[string]string{"a": "1"}}}}
	gid := int64(testGroup)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "fsg"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{FSGroup: &gid},
			Volumes: []corev1.Volume{
				{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, DefaultMode: ptr.To[int32](0o600)}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	m := New(t.TempDir(), src, nil)
	if err := m.Setup(context.Background(), pod, envvars.Info{}); err != nil {
		t.Fatal(err)
	}
	v := m.Paths(pod.UID)
	a := filepath.Join(v["cm"].Path, "a")
	real, err := filepath.EvalSymlinks(a)
	if err != nil {
		t.Fatal(err)
	}
	if g, mode := owner(t, real); g != testGroup || mode != 0o640 {
		t.Fatalf("configMap file: group %d mode %v, want %d and 0640 (0600 plus group read)", g, mode, testGroup)
	}
	if g, mode := owner(t, v["cm"].Path); g != testGroup || mode&fs.ModeSetgid == 0 {
		t.Fatalf("configMap dir: group %d mode %v", g, mode)
	}
	if g, mode := owner(t, v["scratch"].Path); g != testGroup || mode != fs.ModeDir|fs.ModeSetgid|0o777 {
		t.Fatalf("emptyDir: group %d mode %v, want %d and setgid 0777", g, mode, testGroup)
	}
	if err := m.Setup(context.Background(), pod, envvars.Info{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := filepath.EvalSymlinks(a); again != real {
		t.Fatalf("unchanged configMap rewritten: %s then %s", real, again)
	}
}

func TestMemorySize(t *testing.T) {
	mi := func(n int64) int64 { return n << 20 }
	limited := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}}}}}
	unlimited := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	alloc := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	q := func(s string) *resource.Quantity { v := resource.MustParse(s); return &v }
	for _, tc := range []struct {
		name  string
		pod   *corev1.Pod
		limit *resource.Quantity
		alloc corev1.ResourceList
		want  int64
	}{
		{"node allocatable", unlimited, nil, alloc, mi(1024)},
		{"pod limit below allocatable", limited, nil, alloc, mi(256)},
		{"sizeLimit below the pod limit", limited, q("64Mi"), alloc, mi(64)},
		{"sizeLimit above the pod limit is ignored", limited, q("512Mi"), alloc, mi(256)},
		{"sizeLimit above allocatable is ignored", unlimited, q("2Gi"), alloc, mi(1024)},
		{"nothing known: kernel default", unlimited, nil, nil, 0},
		{"only a sizeLimit", unlimited, q("32Mi"), nil, mi(32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := memorySize(tc.pod, &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: tc.limit}, tc.alloc); got != tc.want {
				t.Fatalf("memorySize = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestMemoryEmptyDir mounts a real tmpfs for a memory-backed emptyDir and
// unmounts it on cleanup; without the privilege to mount, the error names
// the volume and what is missing.
func TestMemoryEmptyDir(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "mem"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "shm", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("8Mi"))}}}}},
	}
	m := New(t.TempDir(), nil, nil)
	err := m.Setup(context.Background(), pod, envvars.Info{})
	if errors.Is(err, syscall.EPERM) {
		if !strings.Contains(err.Error(), `volume "shm"`) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
			t.Fatalf("unclear error without mount privilege: %v", err)
		}
		testenv.RequireOrSkip(t, "no privilege to mount tmpfs here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := m.Paths(pod.UID)["shm"].Path
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	const tmpfsMagic = 0x01021994
	if st.Type != tmpfsMagic {
		t.Fatalf("emptyDir is on filesystem type %#x, not tmpfs", st.Type)
	}
	if size := int64(st.Blocks) * st.Bsize; size != 8<<20 {
		t.Fatalf("tmpfs size %d, want 8Mi", size)
	}
	// The kubelet leaves the tmpfs root as tmpfs makes it: 1777.
	if _, mode := owner(t, dir); mode != fs.ModeDir|fs.ModeSticky|0o777 {
		t.Fatalf("tmpfs emptyDir mode %v, want dtrwxrwxrwx", mode)
	}
	// A second sync keeps the same mount (no mount stacked on it).
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Setup(context.Background(), pod, envvars.Info{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kept")); err != nil {
		t.Fatalf("file gone after a second sync: %v", err)
	}
	if err := m.Cleanup(pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.PodDir(pod.UID)); !os.IsNotExist(err) {
		t.Fatalf("pod dir left after cleanup: %v", err)
	}
}
