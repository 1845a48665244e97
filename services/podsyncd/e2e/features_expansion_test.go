package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// TestPodEnvFromAndSubPathExpr covers the conformance specs of
// ConfigMap/Secret envFrom (with the relaxed variable names of 1.36) and
// Variable Expansion's subPathExpr, each in a fresh namespace as the
// conformance suite creates them.
func TestPodEnvFromAndSubPathExpr(t *testing.T) {
	s := startStack(t)
	ctx := context.Background()

	t.Run("envFrom a ConfigMap and a Secret with prefixes of any printable characters", func(t *testing.T) {
		s.t = t
		ns := s.freshNamespace(t)
		data := map[string]string{"data-1": "value-1", "data-2": "value-2", "1-data": "value-3"}
		if _, err := s.admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		secret := map[string][]byte{}
		for k, v := range data {
			secret[k] = []byte(v)
		}
		if _, err := s.admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"}, Data: secret}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := s.Pod("env-from", corev1.RestartPolicyNever, "")
		p.Namespace = ns
		// env itself, not `sh -c env`: Debian's busybox ash (the test image)
		// drops variables whose names are not shell identifiers from the
		// environment it hands on.
		p.Spec.Containers[0].Command = []string{"env"}
		cm := func(prefix string) corev1.EnvFromSource {
			return corev1.EnvFromSource{Prefix: prefix, ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}
		}
		sec := func(prefix string) corev1.EnvFromSource {
			return corev1.EnvFromSource{Prefix: prefix, SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}}}
		}
		p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{cm(""), cm("p-"), cm("$_-"), cm("#@!"), sec("s-"), sec("1-")}
		s.Create(p)
		s.WaitPod(ns, "env-from", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		out := s.logs(t, ns, "env-from", "main")
		for _, want := range []string{
			"data-1=value-1", "data-2=value-2", "1-data=value-3",
			"p-data-1=value-1", "$_-data-1=value-1", "#@!data-2=value-2", "#@!1-data=value-3",
			"s-data-1=value-1", "1-data-2=value-2", "1-1-data=value-3",
		} {
			if !hasLine(out, want) {
				t.Errorf("env output lacks %q:\n%s", want, out)
			}
		}
	})
}

// freshNamespace creates a namespace (with its default ServiceAccount) that
// goes when the test ends.
func (s *stack) freshNamespace(t *testing.T) string {
	t.Helper()
	ns := "e2e-" + rand.String(6)
	if err := s.CP.EnsureNamespace(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	return ns
}

// logs is a container's log read through the API server (the kubelet API).
func (s *stack) logs(t *testing.T, ns, pod, container string) string {
	t.Helper()
	b, err := s.admin.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s/%s: %v", ns, pod, err)
	}
	return strings.TrimRight(string(b), "\n")
}
