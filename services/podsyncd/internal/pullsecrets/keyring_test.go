package pullsecrets

import (
	"encoding/base64"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMatch follows the matching rules the kubelet documents for
// imagePullSecrets (host glob per part, port, path prefix).
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		key, repo string
		want      bool
	}{
		{"*.kubernetes.io", "abc.kubernetes.io/img", true},
		{"*.kubernetes.io", "kubernetes.io/img", false},
		{"*.*.kubernetes.io", "abc.kubernetes.io/img", false},
		{"*.*.kubernetes.io", "abc.def.kubernetes.io/img", true},
		{"prefix.*.io", "prefix.kubernetes.io/img", true},
		{"*-good.kubernetes.io", "prefix-good.kubernetes.io/img", true},
		{"my-registry.io/images", "my-registry.io/images/app", true},
		{"my-registry.io/images", "my-registry.io/other/app", false},
		{"my-registry.io/images", "my-registry.io/images", true},
		{"registry:5000", "registry:5000/app", true},
		{"registry:5000", "registry/app", false},
		{"registry", "registry:5000/app", false},
		{"127.0.0.1:5000", "127.0.0.1:5000/private/busybox", true},
		{"127.0.0.1:5000", "127.0.0.1:5001/private/busybox", false},
	} {
		if got := Match(tc.key, tc.repo); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.key, tc.repo, got, tc.want)
		}
	}
}

func TestKeyringFromSecrets(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("alice:s3cret"))
	js := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "json"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{
			"https://index.docker.io/v1/":{"username":"hub","password":"hubpw"},
			"quay.io":{"auth":"` + auth + `"},
			"http://quay.io/coreos":{"username":"core","password":"corepw"}}}`)},
	}
	cfg := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"},
		Type:       corev1.SecretTypeDockercfg,
		Data:       map[string][]byte{corev1.DockerConfigKey: []byte(`{"127.0.0.1:5000":{"username":"bob","password":"pw"}}`)},
	}
	var k Keyring
	for _, s := range []*corev1.Secret{js, cfg} {
		if err := k.AddSecret(s); err != nil {
			t.Fatal(err)
		}
	}
	users := func(image string) string {
		repo, err := Repository(image)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range k.Lookup(repo) {
			out = append(out, a.Auth.Username+":"+a.Auth.Password)
		}
		return strings.Join(out, ",")
	}
	for image, want := range map[string]string{
		"busybox":                        "hub:hubpw",
		"docker.io/library/busybox:1.36": "hub:hubpw",
		"someone/app":                    "hub:hubpw",
		"quay.io/coreos/etcd:v3":         "core:corepw,alice:s3cret",
		"quay.io/other/app@sha256:" + strings.Repeat("a", 64): "alice:s3cret",
		"127.0.0.1:5000/private/busybox:1.0":                  "bob:pw",
		"127.0.0.1:5001/private/busybox:1.0":                  "",
		"gcr.io/app":                                          "",
	} {
		if got := users(image); got != want {
			t.Errorf("credentials for %s = %q, want %q", image, got, want)
		}
	}

	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "opaque"}, Data: map[string][]byte{"x": nil}}
	if err := k.AddSecret(bad); err == nil || !strings.Contains(err.Error(), "ns/opaque") {
		t.Errorf("opaque secret: %v, want an error naming it", err)
	}
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "broken"},
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"r.io":{"auth":"!!"}}}`)}}
	if err := k.AddSecret(broken); err == nil || !strings.Contains(err.Error(), `"r.io"`) {
		t.Errorf("bad auth: %v, want an error naming the registry", err)
	}
}

// TestCredentialSource checks what pull-credential verification keys on:
// the kubelet's credential hash (the value upstream's own keyring test
// expects for user:password) and the secret's coordinates; node-wide
// entries have no secret.
func TestCredentialSource(t *testing.T) {
	const upstreamHash = "a55436fc140d516560d072c5fe8700385ce9f41629abf65c1edcbcb39fac691d"
	var k Keyring
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "s1", UID: "uid1"},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"test.registry.io":{"auth":"dXNlcjpwYXNzd29yZA=="}}}`)},
	}
	if err := k.AddSecret(s); err != nil {
		t.Fatal(err)
	}
	if err := k.Add(map[string]Entry{"test.registry.io": {Username: "user", Password: "password"}}); err != nil {
		t.Fatal(err)
	}
	got := k.Lookup("test.registry.io/app")
	if len(got) != 2 {
		t.Fatalf("Lookup: %d credentials, want 2", len(got))
	}
	for i, c := range got {
		if c.Hash != upstreamHash {
			t.Errorf("credential %d: hash %s, want the kubelet's %s", i, c.Hash, upstreamHash)
		}
	}
	if src := got[0].Secret; src == nil || *src != (SecretRef{UID: "uid1", Namespace: "ns1", Name: "s1"}) {
		t.Errorf("secret credential's source %+v, want ns1/s1 uid1", src)
	}
	if got[1].Secret != nil {
		t.Errorf("node-wide credential has source %+v, want none", got[1].Secret)
	}
}
