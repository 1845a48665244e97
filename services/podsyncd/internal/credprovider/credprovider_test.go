package credprovider

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// plugin writes an executable plugin that logs each request's image to
// calls and answers with the user from $PLUGIN_USER, cacheKeyType key.
func plugin(t *testing.T, dir, name, key, duration string) string {
	t.Helper()
	calls := filepath.Join(dir, name+".calls")
	script := `#!/bin/sh
read -r req
echo "$req" >> ` + calls + `
cat <<EOT
{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"` + key + `"` + duration + `,
 "auth":{"*.registry.example":{"username":"$PLUGIN_USER","password":"$1"}}}
EOT
`
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return calls
}

func config(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func lines(t *testing.T, p string) int {
	t.Helper()
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func TestProvide(t *testing.T) {
	dir := t.TempDir()
	calls := plugin(t, dir, "reg-plugin", "Registry", "")
	imgCalls := plugin(t, dir, "img-plugin", "Image", `,"cacheDuration":"0s"`)
	cfg := config(t, dir, `apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: reg-plugin
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["*.registry.example"]
  defaultCacheDuration: 10m
  args: ["pw-from-args"]
  env: [{name: PLUGIN_USER, value: alice}]
- name: img-plugin
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: ["other.example:5000/team"]
  defaultCacheDuration: 10m
  env: [{name: PLUGIN_USER, value: bob}]
`)
	ps, err := Load(cfg, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	got := ps.Provide(ctx, "eu.registry.example/app:1")
	if e := got["*.registry.example"]; e.Username != "alice" || e.Password != "pw-from-args" {
		t.Fatalf("Provide = %+v, want alice/pw-from-args from the plugin's env and args", got)
	}
	// Registry cache: another image of the same registry runs nothing.
	ps.Provide(ctx, "eu.registry.example/other:2")
	if n := lines(t, calls); n != 1 {
		t.Errorf("registry-cached plugin ran %d times, want 1", n)
	}
	b, _ := os.ReadFile(calls)
	if !strings.Contains(string(b), `"image":"eu.registry.example/app:1"`) || !strings.Contains(string(b), `"kind":"CredentialProviderRequest"`) {
		t.Errorf("request = %s", b)
	}
	// No match, no run.
	if got := ps.Provide(ctx, "docker.io/library/busybox"); len(got) != 0 {
		t.Errorf("unmatched image got %v", got)
	}
	// cacheDuration 0: every pull asks again; the path prefix must match.
	ps.Provide(ctx, "other.example:5000/team/a")
	ps.Provide(ctx, "other.example:5000/team/a")
	ps.Provide(ctx, "other.example:5000/elsewhere/a")
	if n := lines(t, imgCalls); n != 2 {
		t.Errorf("uncached plugin ran %d times, want 2", n)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	plugin(t, dir, "ok", "Global", "")
	head := "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n"
	for _, tc := range []struct{ body, want string }{
		{"apiVersion: v1\nkind: Pod\n", "want apiVersion kubelet.config.k8s.io/v1"},
		{head + "- name: missing\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.io]\n  defaultCacheDuration: 1m\n", `providers[0].name "missing": no executable plugin`},
		{head + "- name: ../ok\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.io]\n  defaultCacheDuration: 1m\n", "providers[0].name"},
		{head + "- name: ok\n  apiVersion: credentialprovider.kubelet.k8s.io/v1alpha1\n  matchImages: [a.io]\n  defaultCacheDuration: 1m\n", "providers[0].apiVersion"},
		{head + "- name: ok\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  defaultCacheDuration: 1m\n", "providers[0].matchImages"},
		{head + "- name: ok\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.io]\n", "providers[0].defaultCacheDuration"},
		{head + "- name: ok\n  apiVersion: credentialprovider.kubelet.k8s.io/v1\n  matchImages: [a.io]\n  defaultCacheDuration: 1m\n  bogus: 1\n", "bogus"},
	} {
		_, err := Load(config(t, dir, tc.body), dir, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q) = %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}
