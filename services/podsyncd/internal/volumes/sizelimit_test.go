package volumes

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEmptyDirOverLimit(t *testing.T) {
	m := New(t.TempDir(), nil, nil)
	limit := resource.MustParse("1Mi")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "nolimit", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}},
		}},
	}
	if msg := m.EmptyDirOverLimit(pod); msg != "" {
		t.Fatalf("before set-up: %q, want none", msg)
	}
	// write puts size real bytes (not a sparse file: usage counts
	// allocated blocks) into a subdirectory of the volume.
	write := func(vol, name string, size int) {
		t.Helper()
		dir := filepath.Join(m.volDir(pod, emptyDirPlugin, vol), "sub")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, size)
		for i := range b {
			b[i] = 1
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nolimit", "big", 4<<20)
	write("mem", "big", 4<<20)
	write("data", "half", 512<<10)
	if msg := m.EmptyDirOverLimit(pod); msg != "" {
		t.Fatalf("within limits: %q, want none (no limit and memory medium are not checked)", msg)
	}
	write("data", "more", 1<<20)
	want := `Usage of EmptyDir volume "data" exceeds the limit "1Mi". `
	if msg := m.EmptyDirOverLimit(pod); msg != want {
		t.Fatalf("over the limit: %q, want %q", msg, want)
	}
}
