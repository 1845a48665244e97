package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/microlet/microlet/internal/testenv/registry"
)

// TestPodCredentialProvider runs a node with an image credential provider
// exec plugin for the private test registry: a pod without pull secrets
// runs the private image with the plugin's credentials, and the plugin was
// asked for that image.
func TestPodCredentialProvider(t *testing.T) {
	password := "pw-" + rand.String(8)
	priv := registry.StartPrivate(t, "carol", password)
	image := priv.Image(registry.Private)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := `#!/bin/sh
cat >> ` + calls + `
echo >> ` + calls + `
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","auth":{"%s":{"username":"%s","password":"%s"}}}' "$REGISTRY" "$1" "$PASSWORD"
`
	if err := os.WriteFile(filepath.Join(dir, "test-plugin"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
- name: test-plugin
  apiVersion: credentialprovider.kubelet.k8s.io/v1
  matchImages: [%q]
  defaultCacheDuration: 1m
  args: [carol]
  env: [{name: PASSWORD, value: %q}, {name: REGISTRY, value: %q}]
`, priv.Host(), password, priv.Host())
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, "--image-credential-provider-config="+filepath.Join(dir, "config.yaml"), "--image-credential-provider-bin-dir="+dir)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })

	p := s.Pod("via-plugin", corev1.RestartPolicyAlways, "sleep 3600")
	p.Spec.Containers[0].Image = image
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	s.Create(p)
	s.WaitPod("default", "via-plugin", "running the private image", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	b, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"image":%q`, image)
	if !strings.Contains(string(b), want) {
		t.Errorf("plugin requests %s, want one with %s", b, want)
	}
	s.deletePod("via-plugin")
}
