package conformance

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestRemoveLogs: only the recorded pods' log dirs (a mirror pod's by its
// static pod's UID) and the symlinks into them go; others' stay.
func TestRemoveLogs(t *testing.T) {
	root := t.TempDir()
	pods, links := filepath.Join(root, "pods"), filepath.Join(root, "containers")
	for _, d := range []string{"ns_a_uid-a", "ns_static-n_uid-static", "other_b_uid-b"} {
		if err := os.MkdirAll(filepath.Join(pods, d, "c"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pods, d, "c", "0.log"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"a_ns_c-1.log": "ns_a_uid-a", "static-n_ns_c-2.log": "ns_static-n_uid-static", "b_other_c-3.log": "other_b_uid-b"} {
		if err := os.Symlink(filepath.Join(pods, target, "c", "0.log"), filepath.Join(links, name)); err != nil {
			t.Fatal(err)
		}
	}
	made := filepath.Join(root, "made")
	if err := os.Mkdir(made, 0o755); err != nil {
		t.Fatal(err)
	}
	r := &podUIDs{stop: make(chan struct{}), uids: map[types.UID]bool{}, made: []string{made, links}}
	r.add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-a"}})
	r.add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "uid-mirror", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "uid-static"}}})
	if err := r.removeLogs(pods, links); err != nil {
		t.Fatal(err)
	}
	names := func(dir string) []string {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.Name())
		}
		return out
	}
	if got := names(pods); !slices.Equal(got, []string{"other_b_uid-b"}) {
		t.Errorf("pod log dirs left = %v, want only the other pod's", got)
	}
	if got := names(links); !slices.Equal(got, []string{"b_other_c-3.log"}) {
		t.Errorf("symlinks left = %v, want only the other pod's", got)
	}
	// A dir the node made goes when empty, not while others' files are in it.
	if _, err := os.Stat(made); !os.IsNotExist(err) {
		t.Errorf("empty dir the node made: %v, want it removed", err)
	}
}
