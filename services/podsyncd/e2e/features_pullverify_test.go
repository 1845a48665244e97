package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/internal/testenv/registry"
)

// TestPullCredentialVerification is KubeletEnsureSecretPulledImages with
// the default policy (NeverVerifyPreloadedImages) against a registry that
// wants basic auth. Pod A pulls the private image with its secret. On the
// same node, with imagePullPolicy IfNotPresent, a pod without a secret and
// one with a wrong secret are refused (they must pull with their own
// credentials, and the registry says no) instead of reusing A's image; one
// with Never is told the image is not present; a pod in another namespace
// whose secret holds the same credentials runs without pulling ("already
// present on machine and can be accessed by the pod"); a pod using an image
// microlet never pulled (docker build put it there, under a name of the
// private registry that it does not hold) runs with no secret. The
// record is the kubelet's file under podsyncd's data dir, and after
// podsyncd is killed and restarted, a pod without a secret is still refused.
func TestPullCredentialVerification(t *testing.T) {
	s := startStack(t)
	priv, image, password := privateImage(t)
	ctx := context.Background()
	regcred := func(ns, name, pw string) { s.regcred(t, ns, name, dockerConfig(priv.Host(), "alice", pw)) }
	pod := func(ns, name, img string, policy corev1.PullPolicy, secret string) {
		s.privatePod(ns, name, img, policy, secret)
	}
	running := func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}
	waiting := func(reasons ...string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
				return false
			}
			r := p.Status.ContainerStatuses[0].State.Waiting.Reason
			for _, want := range reasons {
				if r == want {
					return true
				}
			}
			return false
		}
	}
	// events are the kubelet's events about a pod, "Reason: message".
	events := func(ns, name string) []string {
		list, err := s.admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range list.Items {
			if e.Source.Component == "kubelet" {
				out = append(out, e.Reason+": "+e.Message)
			}
		}
		return out
	}
	waitEvent := func(ns, name, reason, prefix string, also ...string) {
		t.Helper()
		s.Eventually(fmt.Sprintf("%s event of %s/%s", reason, ns, name), time.Minute, func() (bool, string) {
			all := events(ns, name)
			for _, e := range all {
				if !strings.HasPrefix(e, reason+": "+prefix) {
					continue
				}
				ok := len(also) == 0
				for _, a := range also {
					ok = ok || strings.Contains(strings.ToLower(e), a)
				}
				if ok {
					return true, ""
				}
			}
			return false, strings.Join(all, "\n")
		})
	}
	// The registry's refusal as Docker words it ("no basic auth
	// credentials" without any, "unauthorized" with wrong ones).
	refusal := []string{"no basic auth credentials", "unauthorized", "authentication required"}
	refused := func(ns, name string) {
		t.Helper()
		p := s.WaitPod(ns, name, "refused the image", waiting("ErrImagePull", "ImagePullBackOff"))
		if p.Status.Phase != corev1.PodPending {
			t.Errorf("%s is %s, want Pending", name, p.Status.Phase)
		}
		waitEvent(ns, name, "Failed", fmt.Sprintf("Failed to pull image %q: ", image), refusal...)
	}
	// runsWithoutPulling waits for a pod to run and checks it never pulled.
	runsWithoutPulling := func(ns, name, img string) {
		t.Helper()
		s.WaitPod(ns, name, "running", running)
		waitEvent(ns, name, "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", img))
		for _, e := range events(ns, name) {
			if strings.HasPrefix(e, "Pulling: ") {
				t.Errorf("%s/%s pulled: %s", ns, name, e)
			}
		}
	}

	nsA, nsB, nsC := s.freshNamespace(t), s.freshNamespace(t), s.freshNamespace(t)
	regcred(nsA, "regcred", password)
	regcred(nsB, "wrong", "not-"+password)
	regcred(nsC, "copy", password) // the same credentials, another secret

	pod(nsA, "a", image, corev1.PullIfNotPresent, "regcred")
	s.WaitPod(nsA, "a", "running the private image", running)
	waitEvent(nsA, "a", "Pulled", fmt.Sprintf("Successfully pulled image %q", image))

	t.Run("pods without the credentials are refused", func(t *testing.T) {
		pod(nsB, "none", image, corev1.PullIfNotPresent, "")
		pod(nsB, "wrong", image, corev1.PullIfNotPresent, "wrong")
		pod(nsB, "never", image, corev1.PullNever, "")
		refused(nsB, "none")
		refused(nsB, "wrong")
		s.WaitPod(nsB, "never", "ErrImageNeverPull", waiting("ErrImageNeverPull"))
		waitEvent(nsB, "never", "ErrImageNeverPull", fmt.Sprintf("Container image %q is not present with pull policy of Never", image))
	})
	t.Run("the same credentials in another secret run without a pull", func(t *testing.T) {
		pod(nsC, "copy", image, corev1.PullIfNotPresent, "copy")
		runsWithoutPulling(nsC, "copy", image)
	})
	t.Run("a preloaded image needs no credentials", func(t *testing.T) {
		// Loaded into Docker by someone else than microlet: an image of
		// its own (another ID) named in the private registry, which does
		// not hold it, so any pull of it would fail.
		preloaded := priv.Image("private/preloaded:1.0")
		build := exec.Command("docker", "build", "-q", "-t", preloaded, "-")
		build.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
		build.Stdin = strings.NewReader("FROM " + image + "\nLABEL io.microlet.test=preloaded\n")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("docker build %s: %v: %s", preloaded, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", preloaded).Run() })
		pod(nsB, "preloaded", preloaded, corev1.PullIfNotPresent, "")
		runsWithoutPulling(nsB, "preloaded", preloaded)
	})

	// The kubelet's record: the private image's ID → both secrets.
	a, err := s.Get(nsA, "a")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sec := range s.pullRecord(t, a.Status.ContainerStatuses[0].ImageID, image).KubernetesSecrets {
		got = append(got, sec.Namespace+"/"+sec.Name)
	}
	want := []string{nsA + "/regcred", nsC + "/copy"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("pull record: secrets %v, want %v", got, want)
	}

	t.Run("the records survive a podsyncd restart", func(t *testing.T) {
		pid := s.servicePID("podsyncd")
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.Eventually("podsyncd restarted", 2*time.Minute, func() (bool, string) {
			np := s.servicePID("podsyncd")
			return np != 0 && np != pid, "pid " + strconv.Itoa(np)
		})
		// Forgotten records would make the image look preloaded: this
		// pod would then run.
		pod(nsB, "after-restart", image, corev1.PullIfNotPresent, "")
		refused(nsB, "after-restart")
		pod(nsC, "copy-after-restart", image, corev1.PullIfNotPresent, "copy")
		runsWithoutPulling(nsC, "copy-after-restart", image)
	})
}

// TestNodeDockerConfig gives the node credentials the kubelet's way: a
// config.json in its root directory (podsyncd's data dir). A pod's own
// secret is tried first (the record names it); a pod without a secret
// pulls with the node's credentials, which opens the image to every pod
// on the node: a third pod without a secret runs without pulling.
func TestNodeDockerConfig(t *testing.T) {
	s := startStack(t)
	priv, image, password := privateImage(t)
	ctx := context.Background()
	cfg := dockerConfig(priv.Host(), "alice", password)
	// Nothing on this fresh node has pulled yet, so podsyncd reads the
	// file at the first pull below (then caches it for 5 minutes).
	if err := os.WriteFile(filepath.Join(s.Dir, "data", "podsyncd", "config.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	nsA, nsB, nsC := s.freshNamespace(t), s.freshNamespace(t), s.freshNamespace(t)
	s.regcred(t, nsA, "regcred", cfg)
	pod := func(ns, name string, policy corev1.PullPolicy, secret string) *corev1.Pod {
		s.privatePod(ns, name, image, policy, secret)
		return s.WaitPod(ns, name, "running the private image", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})
	}
	record := func(id string) kubeletv1beta1.ImagePullCredentials { return s.pullRecord(t, id, image) }

	a := pod(nsA, "secret-first", corev1.PullAlways, "regcred")
	if got := record(a.Status.ContainerStatuses[0].ImageID); got.NodePodsAccessible || len(got.KubernetesSecrets) != 1 || got.KubernetesSecrets[0].Name != "regcred" {
		t.Errorf("pulled with the pod's secret first: record %+v, want the secret %s/regcred", got, nsA)
	}
	b := pod(nsB, "node-creds", corev1.PullAlways, "")
	if got := record(b.Status.ContainerStatuses[0].ImageID); !got.NodePodsAccessible {
		t.Errorf("pulled with the node's config.json: record %+v, want nodePodsAccessible", got)
	}
	pod(nsC, "any-pod", corev1.PullIfNotPresent, "")
	// The Pulled event comes after any Pulling one would have.
	var seen []string
	s.Eventually("Pulled event of any-pod", time.Minute, func() (bool, string) {
		list, err := s.admin.CoreV1().Events(nsC).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=any-pod"})
		if err != nil {
			return false, err.Error()
		}
		seen = seen[:0]
		done := false
		for _, e := range list.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			done = done || (e.Reason == "Pulled" && strings.Contains(e.Message, "already present on machine and can be accessed by the pod"))
		}
		return done, strings.Join(seen, "\n")
	})
	for _, e := range seen {
		if strings.HasPrefix(e, "Pulling: ") {
			t.Errorf("any-pod pulled an image the node's credentials opened to every pod: %s", e)
		}
	}
}

// privateImage starts the private registry (basic auth, user alice) and
// returns it, the private image (removed from Docker when the test ends)
// and the password.
func privateImage(t *testing.T) (*registry.Registry, string, string) {
	t.Helper()
	password := "pw-" + rand.String(8)
	priv := registry.StartPrivate(t, "alice", password)
	image := priv.Image(registry.Private)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
	return priv, image, password
}

// dockerConfig is a config.json (and kubernetes.io/dockerconfigjson
// secret body) with user:password for host.
func dockerConfig(host, user, password string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	return []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, host, auth))
}

// regcred creates a kubernetes.io/dockerconfigjson secret of cfg.
func (s *stack) regcred(t *testing.T, ns, name string, cfg []byte) {
	t.Helper()
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
	if _, err := s.admin.CoreV1().Secrets(ns).Create(context.Background(), sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// privatePod creates a pod in ns running image with the pull policy and
// the pull secret (none when empty).
func (s *stack) privatePod(ns, name, image string, policy corev1.PullPolicy, secret string) {
	p := s.Pod(name, corev1.RestartPolicyAlways, "sleep 3600")
	p.Namespace = ns
	p.Spec.Containers[0].Image = image
	p.Spec.Containers[0].ImagePullPolicy = policy
	if secret != "" {
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: secret}}
	}
	s.Create(p)
}

// pullRecord reads the kubelet's pull record podsyncd keeps for an image
// ID (a container status' imageID) and returns the credentials it holds
// for image's name (the image without its tag).
func (s *stack) pullRecord(t *testing.T, imageID, image string) kubeletv1beta1.ImagePullCredentials {
	t.Helper()
	id := imageID[strings.Index(imageID, "sha256:"):]
	path := filepath.Join(s.Dir, "data", "podsyncd", "image_manager", "pulled", fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(id))))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("pull record of %s: %v", id, err)
	}
	var rec kubeletv1beta1.ImagePulledRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Kind != "ImagePulledRecord" {
		t.Fatalf("%s: %v (kind %q)", path, err, rec.Kind)
	}
	return rec.CredentialMapping[image[:strings.LastIndex(image, ":")]]
}
