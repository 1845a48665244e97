package pullmanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/internal/statefile/statefiletest"
)

// images is a narrow ListImages double for the intent recovery.
type images struct {
	criapi.ImageManagerService
	list []*runtimeapi.Image
}

func (i images) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	return i.list, nil
}

func newManager(t *testing.T, dir, policy string, allow []string, list ...*runtimeapi.Image) *Manager {
	t.Helper()
	p, err := NewPolicy(policy, allow)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), dir, p, images{list: list}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func secret(ns, name, uid, hash string) kubeletv1beta1.ImagePullSecret {
	return kubeletv1beta1.ImagePullSecret{Namespace: ns, Name: name, UID: uid, CredentialHash: hash}
}

func secrets(s ...kubeletv1beta1.ImagePullSecret) PodSecrets {
	return func() ([]kubeletv1beta1.ImagePullSecret, error) { return s, nil }
}

// pulled records a successful pull as the pod runtime does.
func pulled(t *testing.T, m *Manager, image, ref string, creds *kubeletv1beta1.ImagePullCredentials) {
	t.Helper()
	if err := m.RecordPullIntent(image); err != nil {
		t.Fatal(err)
	}
	m.RecordImagePulled(image, ref, creds)
}

func must(t *testing.T, m *Manager, image, ref string, ps PodSecrets) bool {
	t.Helper()
	got, err := m.MustAttemptImagePull(context.Background(), image, ref, ps)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestVerification follows a private image through pods with and without
// its credentials, across a restart (a new Manager on the same files).
func TestVerification(t *testing.T) {
	dir := t.TempDir()
	const image, ref = "reg.io/private/app:1.0", "sha256:aaa"
	m := newManager(t, dir, "", nil)
	a := secret("ns-a", "regcred", "uid-a", "hash-good")
	pulled(t, m, image, ref, &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{a}})

	for _, m := range []*Manager{m, newManager(t, dir, "", nil)} { // before and after a restart
		for _, tc := range []struct {
			name  string
			image string
			ps    PodSecrets
			want  bool
		}{
			{"no secret", image, secrets(), true},
			{"a wrong secret", image, secrets(secret("ns-b", "other", "uid-x", "hash-bad")), true},
			{"the same secret", image, secrets(a), false},
			{"another tag of the same name", "reg.io/private/app:2.0", secrets(a), false},
			{"a secret with the same contents elsewhere", image, secrets(secret("ns-c", "copy", "uid-c", "hash-good")), false},
			{"the same secret with new contents", image, secrets(secret("ns-a", "regcred", "uid-a", "hash-rotated")), false},
			{"another name for the same ID", "reg.io/mirror/app:1.0", secrets(a), true},
		} {
			if got := must(t, m, tc.image, ref, tc.ps); got != tc.want {
				t.Errorf("%s: MustAttemptImagePull = %v, want %v", tc.name, got, tc.want)
			}
		}
	}
	// The matches were remembered: the copy by its coordinates, the
	// rotated secret by its new hash.
	r, _, err := m.store.record(ref)
	if err != nil {
		t.Fatal(err)
	}
	got := r.CredentialMapping["reg.io/private/app"].KubernetesSecrets
	want := []kubeletv1beta1.ImagePullSecret{secret("ns-a", "regcred", "uid-a", "hash-rotated"), secret("ns-c", "copy", "uid-c", "hash-good")}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("recorded secrets %+v, want %+v", got, want)
	}

	// An anonymous or node-credential pull opens the image to every pod.
	pulled(t, m, image, ref, &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true})
	if must(t, m, image, ref, secrets()) {
		t.Error("after a node-wide pull a pod without secrets must still verify")
	}
	errLookup := errors.New("secret unreadable")
	pulled(t, m, "reg.io/x:1", "sha256:bbb", &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{a}})
	if got, err := m.MustAttemptImagePull(context.Background(), "reg.io/x:1", "sha256:bbb",
		func() ([]kubeletv1beta1.ImagePullSecret, error) { return nil, errLookup }); !got || !errors.Is(err, errLookup) {
		t.Errorf("secret lookup failing: %v, %v; want true and the error", got, err)
	}
}

// TestPolicies: what each policy asks of a preloaded image (no record)
// and of one podsyncd pulled with a secret the pod lacks.
func TestPolicies(t *testing.T) {
	const preloaded, ours = "registry.k8s.io/pause:3.10", "reg.io/private/app:1.0"
	for _, tc := range []struct {
		policy             string
		allow              []string
		preloaded, private bool
	}{
		{"NeverVerify", nil, false, false},
		{"", nil, false, true}, // NeverVerifyPreloadedImages
		{"NeverVerifyPreloadedImages", nil, false, true},
		{"NeverVerifyAllowlistedImages", []string{"registry.k8s.io/*"}, false, true},
		{"NeverVerifyAllowlistedImages", []string{"registry.k8s.io/other"}, true, true},
		{"NeverVerifyAllowlistedImages", []string{"reg.io/private/app"}, true, false},
		{"AlwaysVerify", nil, true, true},
	} {
		m := newManager(t, t.TempDir(), tc.policy, tc.allow)
		pulled(t, m, ours, "sha256:ours", &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secret("ns", "s", "u", "h")}})
		if got := must(t, m, preloaded, "sha256:pause", secrets()); got != tc.preloaded {
			t.Errorf("%s %v: preloaded image must verify = %v, want %v", tc.policy, tc.allow, got, tc.preloaded)
		}
		if got := must(t, m, ours, "sha256:ours", secrets()); got != tc.private {
			t.Errorf("%s %v: private image without its secret must verify = %v, want %v", tc.policy, tc.allow, got, tc.private)
		}
	}
}

func TestBadPolicyNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		policy string
		allow  []string
		field  string
	}{
		{"Sometimes", nil, "image_pull_credentials_verification_policy"},
		{"", []string{"reg.io/*"}, "preloaded_images_verification_allowlist"},
		{"NeverVerifyAllowlistedImages", []string{"reg.io/app:1.0"}, "preloaded_images_verification_allowlist[0]"},
		{"NeverVerifyAllowlistedImages", []string{"ok.io/a", "reg.io/*/app"}, "preloaded_images_verification_allowlist[1]"},
		{"NeverVerifyAllowlistedImages", []string{" reg.io/app"}, "preloaded_images_verification_allowlist[0]"},
		{"NeverVerifyAllowlistedImages", []string{"/*"}, "preloaded_images_verification_allowlist[0]"},
	} {
		_, err := NewPolicy(tc.policy, tc.allow)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewPolicy(%q, %q) = %v, want an error naming %s", tc.policy, tc.allow, err, tc.field)
		}
	}
}

// TestIntents: a pull under way makes the image "pulled by podsyncd"
// before any record exists; an intent left by a crash becomes a record
// without credentials once the runtime has the image.
func TestIntents(t *testing.T) {
	dir := t.TempDir()
	const image = "reg.io/private/app:1.0"
	m := newManager(t, dir, "", nil)
	if err := m.RecordPullIntent(image); err != nil {
		t.Fatal(err)
	}
	if !must(t, m, image, "sha256:aaa", secrets()) {
		t.Error("an image being pulled counts as preloaded")
	}
	// podsyncd dies here; the image arrived anyway.
	m2 := newManager(t, dir, "", nil, &runtimeapi.Image{Id: "sha256:aaa", RepoTags: []string{image}})
	if ok, err := m2.store.intentExists(image); err != nil || ok {
		t.Errorf("intent still there after recovery (%v)", err)
	}
	r, ok, err := m2.store.record("sha256:aaa")
	if err != nil || !ok || len(r.CredentialMapping) != 0 {
		t.Fatalf("recovered record %+v, %v, %v; want one with no credentials", r, ok, err)
	}
	if !must(t, m2, image, "sha256:aaa", secrets(secret("ns", "s", "u", "h"))) {
		t.Error("a recovered image must be verified")
	}
	// A failed pull drops the intent only when the last pull ends.
	_ = m2.RecordPullIntent("reg.io/b:1")
	_ = m2.RecordPullIntent("reg.io/b:1")
	m2.RecordImagePullFailed("reg.io/b:1")
	if ok, _ := m2.store.intentExists("reg.io/b:1"); !ok {
		t.Error("intent dropped while a second pull is under way")
	}
	m2.RecordImagePullFailed("reg.io/b:1")
	if ok, _ := m2.store.intentExists("reg.io/b:1"); ok {
		t.Error("intent kept after both pulls failed")
	}
}

// TestKubeletFiles reads records the kubelet wrote (upstream's testdata
// shapes, v1beta1 and v1alpha1) and writes files the kubelet reads.
func TestKubeletFiles(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, dir, "", nil)
	files := map[string]string{
		"testimageref":             `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testimageref","credentialMapping":{"docker.io/testing/test":{"kubernetesSecrets":[{"uid":"testsecretuid","namespace":"default","name":"pull-secret","credentialHash":"testsecrethash"}]}}}`,
		"testimage-anonpull-alpha": `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2025-06-21T12:26:40Z","imageRef":"testimage-anonpull-alpha","credentialMapping":{"docker.io/testing/test":{"nodePodsAccessible":true}}}`,
		"testbrokenrecord":         `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2024-10-21T12:26:40Z","imageRef":"testbrokenrecord":"credentialMapping":{}}`,
	}
	for ref, body := range files {
		if err := os.WriteFile(filepath.Join(dir, "image_manager", "pulled", fileName(ref)), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const image = "docker.io/testing/test:latest"
	if !must(t, m, image, "testimageref", secrets()) || must(t, m, image, "testimageref", secrets(secret("default", "pull-secret", "testsecretuid", "testsecrethash"))) {
		t.Error("kubelet's v1beta1 record not honoured")
	}
	if must(t, m, image, "testimage-anonpull-alpha", secrets()) {
		t.Error("kubelet's v1alpha1 nodePodsAccessible record not honoured")
	}
	if !must(t, m, image, "testbrokenrecord", secrets()) {
		t.Error("a broken record must mean verify")
	}

	pulled(t, m, "reg.io/app:1", "sha256:ccc", &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true})
	b, err := os.ReadFile(filepath.Join(dir, "image_manager", "pulled", "sha256-"+sha("sha256:ccc")))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"`; !strings.HasPrefix(string(b), want) ||
		!strings.HasSuffix(string(b), `"imageRef":"sha256:ccc","credentialMapping":{"reg.io/app":{"nodePodsAccessible":true}}}`) {
		t.Errorf("record file %s, not the kubelet's shape", b)
	}
}

// TestPrune drops records of images gone before the GC began, not newer ones.
func TestPrune(t *testing.T) {
	m := newManager(t, t.TempDir(), "", nil)
	creds := &kubeletv1beta1.ImagePullCredentials{NodePodsAccessible: true}
	pulled(t, m, "reg.io/kept:1", "sha256:kept", creds)
	pulled(t, m, "reg.io/gone:1", "sha256:gone", creds)
	until := time.Now().Add(time.Hour)
	m.PruneUnknownRecords([]string{"sha256:kept"}, until)
	if _, ok, _ := m.store.record("sha256:kept"); !ok {
		t.Error("record of a present image pruned")
	}
	if _, ok, _ := m.store.record("sha256:gone"); ok {
		t.Error("record of a removed image kept")
	}
	pulled(t, m, "reg.io/new:1", "sha256:new", creds)
	m.PruneUnknownRecords(nil, time.Now().Add(-time.Hour))
	if _, ok, _ := m.store.record("sha256:new"); !ok {
		t.Error("record written after the GC began pruned")
	}
}

func sha(s string) string {
	b := sha256.Sum256([]byte(s))
	return hex.EncodeToString(b[:])
}

// corruptFile writes garbage where the record or intent of key lives.
func corruptFile(t *testing.T, dir, sub, key, content string) string {
	t.Helper()
	p := filepath.Join(dir, "image_manager", sub, fileName(key))
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// movedAside is the one file next to p that Quarantine made, holding content.
func movedAside(t *testing.T, p, content string) {
	t.Helper()
	statefiletest.MovedAside(t, p, statefiletest.Want{Content: []byte(content)})
}

// A garbled or truncated pull record or intent is moved aside and never
// fails open: an image it was about is still one every pod must be verified
// for (a record with no credentials takes its place), never "preloaded".
func TestCorruptRecordsQuarantined(t *testing.T) {
	const (
		image   = "reg.io/private/app:1.0"
		ref     = "sha256:aaa"
		garbled = "\x00\x01{garbage"
		trunc   = `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"sha256:aaa","credentialMapping":{"reg.io/private/app":{"kubernetesSecrets":[{"uid":"u"`
	)
	allowed := secrets(secret("ns", "s", "u", "h"))
	for name, content := range map[string]string{"garbled": garbled, "truncated": trunc} {
		t.Run("record looked up, "+name, func(t *testing.T) {
			dir := t.TempDir()
			m := newManager(t, dir, "", nil)
			pulled(t, m, image, ref, &kubeletv1beta1.ImagePullCredentials{KubernetesSecrets: []kubeletv1beta1.ImagePullSecret{secret("ns", "s", "u", "h")}})
			p := corruptFile(t, dir, "pulled", ref, content)
			if !must(t, m, image, ref, allowed) {
				t.Error("a pod was let use the image of a corrupt record without a pull")
			}
			movedAside(t, p, content)
			r, ok, err := m.store.record(ref)
			if err != nil || !ok || len(r.CredentialMapping) != 0 {
				t.Fatalf("record after quarantine: %+v %v %v; want one with no credentials", r, ok, err)
			}
			// Fail safe across a restart too: the replacement is on disk.
			m2 := newManager(t, dir, "", nil)
			if !must(t, m2, image, ref, secrets()) {
				t.Error("after a restart the image counts as preloaded")
			}
		})
	}
	t.Run("records pruned", func(t *testing.T) {
		dir := t.TempDir()
		m := newManager(t, dir, "", nil)
		kept := corruptFile(t, dir, "pulled", "sha256:kept", garbled)
		gone := corruptFile(t, dir, "pulled", "sha256:gone", garbled)
		m.PruneUnknownRecords([]string{"sha256:kept"}, time.Now().Add(time.Hour))
		movedAside(t, kept, garbled)
		movedAside(t, gone, garbled)
		if r, ok, err := m.store.record("sha256:kept"); err != nil || !ok || len(r.CredentialMapping) != 0 {
			t.Errorf("record of a present image: %+v %v %v; want one with no credentials", r, ok, err)
		}
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("corrupt record of a removed image still in place: %v", err)
		}
	})
	t.Run("intents at start", func(t *testing.T) {
		dir := t.TempDir()
		newManager(t, dir, "", nil)
		arrived := corruptFile(t, dir, "pulling", image, garbled)
		never := corruptFile(t, dir, "pulling", "reg.io/never:1", garbled)
		m := newManager(t, dir, "", nil, &runtimeapi.Image{Id: ref, RepoTags: []string{image}})
		movedAside(t, arrived, garbled)
		movedAside(t, never, garbled)
		if r, ok, err := m.store.record(ref); err != nil || !ok || len(r.CredentialMapping) != 0 {
			t.Errorf("record from a corrupt intent of a present image: %+v %v %v", r, ok, err)
		}
		if !must(t, m, image, ref, allowed) {
			t.Error("image of a corrupt intent counts as preloaded")
		}
		for _, p := range []string{arrived, never} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Errorf("corrupt intent %s still in place: %v", filepath.Base(p), err)
			}
		}
	})
}
