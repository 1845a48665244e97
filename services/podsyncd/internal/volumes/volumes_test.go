package volumes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
)

type objects struct {
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (o objects) ConfigMap(_ context.Context, _, name string) (*corev1.ConfigMap, error) {
	if cm, ok := o.cms[name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

func (o objects) Secret(_ context.Context, _, name string) (*corev1.Secret, error) {
	if s, ok := o.secrets[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSetupAndRefresh(t *testing.T) {
	yes := true
	mode := int32(0o400)
	src := objects{
		cms:     map[string]*corev1.ConfigMap{"cm": {Data: map[string]string{"a": "1", "b": "2"}}},
		secrets: map[string]*corev1.Secret{"sec": {Data: map[string][]byte{"token": []byte("s3cret")}}},
	}
	hostDir := filepath.Join(t.TempDir(), "made")
	doc := corev1.HostPathDirectoryOrCreate
	file := corev1.HostPathFile
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"b": "2", "a": "1"},
			Annotations: map[string]string{"note": "say \"hi\"\n"}},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"},
				Items: []corev1.KeyToPath{{Key: "a", Path: "dir/a.txt"}}}}},
			{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "sec", DefaultMode: &mode}}},
			{Name: "opt", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: &yes}}},
			{Name: "down", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
			{Name: "empty", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &doc}}},
		}},
	}
	m := New(t.TempDir(), src, nil)
	if err := m.Setup(context.Background(), pod, envvars.Info{}); err != nil {
		t.Fatal(err)
	}
	v := m.Paths(pod.UID)
	if got := read(t, filepath.Join(v["cm"].Path, "dir/a.txt")); got != "1" {
		t.Fatalf("cm item = %q", got)
	}
	if _, err := os.Stat(filepath.Join(v["cm"].Path, "b")); !os.IsNotExist(err) {
		t.Fatalf("key not in items was written: %v", err)
	}
	fi, err := os.Stat(filepath.Join(v["sec"].Path, "token"))
	if err != nil || fi.Mode().Perm() != 0o400 || read(t, filepath.Join(v["sec"].Path, "token")) != "s3cret" || !v["sec"].ReadOnly {
		t.Fatalf("secret file: %v %v %+v", fi, err, v["sec"])
	}
	if got := read(t, filepath.Join(v["down"].Path, "labels")); got != "a=\"1\"\nb=\"2\"" {
		t.Fatalf("labels = %q", got)
	}
	if got := read(t, filepath.Join(v["down"].Path, "annotations")); got != `note="say \"hi\"\n"` {
		t.Fatalf("annotations = %q", got)
	}
	if got := read(t, filepath.Join(v["down"].Path, "name")); got != "p" {
		t.Fatalf("name = %q", got)
	}
	if fi, err := os.Stat(hostDir); err != nil || !fi.IsDir() || v["host"].Path != hostDir {
		t.Fatalf("DirectoryOrCreate: %v %v", fi, err)
	}
	if fi, err := os.Stat(v["empty"].Path); err != nil || !fi.IsDir() {
		t.Fatalf("emptyDir: %v", err)
	}

	// An update replaces the file whole through the ..data link.
	src.cms["cm"].Data["a"] = "changed"
	if err := m.Setup(context.Background(), pod, envvars.Info{}); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(v["cm"].Path, "dir/a.txt")); got != "changed" {
		t.Fatalf("after update = %q", got)
	}
	entries, _ := os.ReadDir(v["cm"].Path)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 3 { // ..<ts>, ..data, dir
		t.Fatalf("old payload dirs left behind: %v", names)
	}

	// A required configMap that is missing, and a hostPath of the wrong type, fail.
	bad := pod.DeepCopy()
	bad.Spec.Volumes = []corev1.Volume{
		{Name: "req", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}}},
		{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: hostDir, Type: &file}}},
	}
	err = m.Setup(context.Background(), bad, envvars.Info{})
	if err == nil || !strings.Contains(err.Error(), `"absent" not found`) || !strings.Contains(err.Error(), "is not a File") {
		t.Fatalf("err = %v", err)
	}
	if err := m.Cleanup(pod.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.PodDir(pod.UID)); !os.IsNotExist(err) {
		t.Fatalf("pod dir left: %v", err)
	}
}

type fakeTokens struct{ n int }

func (f *fakeTokens) Token(_ context.Context, pod *corev1.Pod, aud string, secs int64) (string, time.Time, error) {
	f.n++
	return fmt.Sprintf("tok-%d-%s-%s", f.n, pod.Name, aud), time.Unix(0, 0).Add(time.Duration(secs) * time.Second), nil
}

func TestProjectedTokenRefresh(t *testing.T) {
	secs := int64(1000)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u2"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "api", ExpirationSeconds: &secs}}}}}}}}}
	tokens := &fakeTokens{}
	m := New(t.TempDir(), nil, tokens)
	now := time.Unix(0, 0)
	m.now = func() time.Time { return now }
	setup := func() string {
		t.Helper()
		if err := m.Setup(context.Background(), pod, envvars.Info{}); err != nil {
			t.Fatal(err)
		}
		return read(t, filepath.Join(m.Paths(pod.UID)["proj"].Path, "token"))
	}
	if got := setup(); got != "tok-1-p-api" {
		t.Fatalf("token = %q", got)
	}
	now = now.Add(700 * time.Second) // under 80% of its life: kept
	if got := setup(); got != "tok-1-p-api" || tokens.n != 1 {
		t.Fatalf("token = %q after %d requests, want the cached one", got, tokens.n)
	}
	now = now.Add(200 * time.Second) // past 80%: refreshed
	if got := setup(); got != "tok-2-p-api" {
		t.Fatalf("token = %q, want a refreshed one", got)
	}
}

// TestImageVolumeSetup: an image volume sets up without a host path (the
// runtime mounts the image), read-only, and creates nothing under the pod
// dir; an unsupported type next to it still fails naming the volume.
func TestImageVolumeSetup(t *testing.T) {
	m := New(t.TempDir(), objects{}, nil)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-img"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "img", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "example.test/data:1", PullPolicy: corev1.PullIfNotPresent}}},
		{Name: "nfs", VolumeSource: corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/"}}},
	}}}
	err := m.Setup(context.Background(), pod, envvars.Info{})
	if err == nil || !strings.Contains(err.Error(), `volume "nfs"`) || strings.Contains(err.Error(), `"img"`) {
		t.Fatalf("Setup error %v, want only the nfs volume's", err)
	}
	v, ok := m.Paths(pod.UID)["img"]
	if !ok || !v.Image || !v.ReadOnly || v.Path != "" {
		t.Errorf("image volume = %+v (set up %v), want Image, ReadOnly and no path", v, ok)
	}
	if _, err := os.Stat(filepath.Join(m.PodDir(pod.UID), "volumes")); !os.IsNotExist(err) {
		t.Errorf("image volume made a volumes dir: %v", err)
	}
}
