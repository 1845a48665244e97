package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/microlet/microlet/internal/testenv/registry"
)

// TestPodPullSecrets pulls a private image from a registry that wants basic
// auth: a pod with the right imagePullSecret runs, one whose ServiceAccount
// carries the secret runs too (the admission plugin copies it into the
// spec), and one without it fails to pull with the kubelet's Failed event
// naming the image and the registry's refusal (Docker 20.10: "no basic
// auth credentials").
func TestPodPullSecrets(t *testing.T) {
	s := startStack(t)
	password := "pw-" + rand.String(8)
	priv := registry.StartPrivate(t, "alice", password)
	image := priv.Image(registry.Private)
	// This runs before the node stops (cleanups run last first): -f drops
	// the name even while the pods' containers still use the image.
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
	ns := s.freshNamespace(t)
	ctx := context.Background()

	auth := base64.StdEncoding.EncodeToString([]byte("alice:" + password))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: ns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, priv.Host(), auth))},
	}
	if _, err := s.admin.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Name: "puller", Namespace: ns},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "regcred"}},
	}
	if _, err := s.admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, edit func(*corev1.PodSpec)) *corev1.Pod {
		p := s.Pod(name, corev1.RestartPolicyAlways, "sleep 3600")
		p.Namespace = ns
		p.Spec.Containers[0].Image = image
		// Always: each pod pulls with its own credentials, whatever an
		// earlier pull left on the node.
		p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
		edit(&p.Spec)
		return p
	}
	s.Create(pod("without", func(*corev1.PodSpec) {}))
	s.Create(pod("with-secret", func(sp *corev1.PodSpec) {
		sp.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	}))
	viaSA := s.Create(pod("via-sa", func(sp *corev1.PodSpec) { sp.ServiceAccountName = "puller" }))
	if len(viaSA.Spec.ImagePullSecrets) != 1 || viaSA.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Fatalf("admission did not copy the ServiceAccount's pull secret: %+v", viaSA.Spec.ImagePullSecrets)
	}
	running := func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}
	for _, name := range []string{"with-secret", "via-sa"} {
		p := s.WaitPod(ns, name, "running the private image", running)
		if got := p.Status.ContainerStatuses[0].Image; got != image {
			t.Errorf("%s runs image %q, want %q", name, got, image)
		}
	}

	// Without credentials: ErrImagePull/ImagePullBackOff and the Failed event.
	p := s.WaitPod(ns, "without", "refused the image", func(p *corev1.Pod) bool {
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return false
		}
		r := p.Status.ContainerStatuses[0].State.Waiting.Reason
		return r == "ErrImagePull" || r == "ImagePullBackOff"
	})
	if p.Status.Phase != corev1.PodPending {
		t.Errorf("pod without credentials is %s, want Pending", p.Status.Phase)
	}
	prefix := fmt.Sprintf("Failed to pull image %q: ", image)
	// Docker 20.10 words the 401 "no basic auth credentials"; other
	// engines say "unauthorized".
	refused := func(msg string) bool {
		m := strings.ToLower(msg)
		return strings.Contains(m, "no basic auth credentials") || strings.Contains(m, "unauthorized")
	}
	s.Eventually("Failed event for the unauthorized pull", time.Minute, func() (bool, string) {
		list, err := s.admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=without"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Reason == "Failed" && e.Type == corev1.EventTypeWarning && e.Source.Component == "kubelet" &&
				strings.HasPrefix(e.Message, prefix) && refused(e.Message) {
				t.Logf("event: %s", e.Message)
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
	})
}
