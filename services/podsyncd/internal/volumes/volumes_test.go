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
	testingclock "k8s.io/utils/clock/testing"

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

// fakeTokens issues numbered tokens expiring secs after the clock's now
// (the Unix epoch without one).
type fakeTokens struct {
	n     int
	clock *testingclock.FakeClock
}

func (f *fakeTokens) Token(_ context.Context, pod *corev1.Pod, aud string, secs int64) (string, time.Time, error) {
	f.n++
	issued := time.Unix(0, 0)
	if f.clock != nil {
		issued = f.clock.Now()
	}
	return fmt.Sprintf("tok-%d-%s-%s", f.n, pod.Name, aud), issued.Add(time.Duration(secs) * time.Second), nil
}

func TestProjectedTokenRefresh(t *testing.T) {
	secs := int64(1000)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u2"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "api", ExpirationSeconds: &secs}}}}}}}}}
	tokens := &fakeTokens{}
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	m := New(t.TempDir(), nil, tokens, WithClock(clk))
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
	clk.Step(700 * time.Second) // under 80% of its life: kept
	if got := setup(); got != "tok-1-p-api" || tokens.n != 1 {
		t.Fatalf("token = %q after %d requests, want the cached one", got, tokens.n)
	}
	clk.Step(200 * time.Second) // past 80%: refreshed
	if got := setup(); got != "tok-2-p-api" {
		t.Fatalf("token = %q, want a refreshed one", got)
	}
}

// TestProjectedTokenAcrossClockSteps: a cached token is refreshed when the
// clock is stepped back past the moment it was issued (its age cannot be
// told; kept, it would be served until the clock caught up and past its
// expiry) and when the clock jumps forward past 80% of its life (a day
// forward: it has expired at the API server); a small step forward keeps
// it. A token never lives in the cache longer than a day.
func TestProjectedTokenAcrossClockSteps(t *testing.T) {
	secs := int64(3600)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u3"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", Audience: "api", ExpirationSeconds: &secs}}}}}}}}}
	clk := testingclock.NewFakeClock(time.Unix(0, 0))
	tokens := &fakeTokens{clock: clk}
	m := New(t.TempDir(), nil, tokens, WithClock(clk))
	for i, s := range []struct {
		what string
		step time.Duration
		want int // requests so far
	}{
		{"issued", 0, 1},
		{"10 minutes on", 10 * time.Minute, 1},
		{"stepped back an hour", -time.Hour, 2},
		{"10 minutes after that", 10 * time.Minute, 2},
		{"stepped back 11 minutes, before it was issued", -11 * time.Minute, 3},
		{"a day forward", 24 * time.Hour, 4},
		{"47 minutes on", 47 * time.Minute, 4},
		{"49 minutes on: past 80% of the hour", 2 * time.Minute, 5},
	} {
		clk.Step(s.step)
		if err := m.Setup(context.Background(), pod, envvars.Info{}); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("tok-%d-p-api", s.want)
		if got := read(t, filepath.Join(m.Paths(pod.UID)["proj"].Path, "token")); got != want || tokens.n != s.want {
			t.Fatalf("step %d (%s): token %q after %d requests, want %q", i, s.what, got, tokens.n, want)
		}
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
