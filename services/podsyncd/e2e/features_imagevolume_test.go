package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/testenv/registry"
)

// TestPodImageVolume runs a pod with an image volume (volumes[].image, the
// web-server image pulled with pullPolicy Always): the container sees the
// image's files at the mount path, read-only, and a second mount with
// subPath "www" sees only that directory. A pod whose image volume names an
// image the registry does not have waits with ErrImagePull or
// ImagePullBackOff and a Failed event naming the image.
func TestPodImageVolume(t *testing.T) {
	s := startStack(t)
	ns := s.freshNamespace(t)
	ctx := context.Background()
	volImage := strings.Replace(s.image, registry.Busybox, registry.WebServer, 1)
	if volImage == s.image {
		t.Fatalf("cannot derive the web-server image from %q", s.image)
	}
	pod := func(name, image string) *corev1.Pod {
		p := s.Pod(name, corev1.RestartPolicyAlways, "sleep 3600")
		p.Namespace = ns
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "img", VolumeSource: corev1.VolumeSource{
			Image: &corev1.ImageVolumeSource{Reference: image, PullPolicy: corev1.PullAlways}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: "img", MountPath: "/vol"},
			corev1.VolumeMount{Name: "img", MountPath: "/sub", SubPath: "www"})
		return p
	}
	s.Create(pod("image-volume", volImage))
	missing := strings.Replace(s.image, registry.Busybox, "microlet/no-such-image:1.0", 1)
	s.Create(pod("missing-image", missing))

	p := s.WaitPod(ns, "image-volume", "running with the image volume", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	if got := s.execIn(p, "main", "cat", "/vol/www/index.html"); got != registry.WebServerPage {
		t.Errorf("/vol/www/index.html = %q, want the web-server page", got)
	}
	if got := s.execIn(p, "main", "cat", "/sub/index.html"); got != registry.WebServerPage {
		t.Errorf("subPath www: /sub/index.html = %q, want the web-server page", got)
	}
	if out, code := s.execCode(p, "main", "ls", "/sub"); code != 0 || out != "index.html\n" {
		t.Errorf("subPath www: ls /sub = %q exit %d, want only index.html", out, code)
	}
	if out, code := s.execCode(p, "main", "sh", "-c", "test -e /vol/usr/sbin/nginx && test ! -e /sub/etc && echo ok"); code != 0 || out != "ok\n" {
		t.Errorf("whole image at /vol, only www at /sub: %q exit %d", out, code)
	}
	for _, dir := range []string{"/vol", "/sub"} {
		if out, _ := s.execCode(p, "main", "sh", "-c", "touch "+dir+"/new 2>&1; echo rc=$?"); !strings.Contains(out, "Read-only file system") || !strings.HasSuffix(out, "rc=1\n") {
			t.Errorf("writing into the image volume at %s: %q, want a read-only refusal", dir, out)
		}
	}

	bad := s.WaitPod(ns, "missing-image", "refused the image volume's image", func(p *corev1.Pod) bool {
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			return false
		}
		r := p.Status.ContainerStatuses[0].State.Waiting.Reason
		return r == "ErrImagePull" || r == "ImagePullBackOff"
	})
	if w := bad.Status.ContainerStatuses[0].State.Waiting; !strings.Contains(w.Message, missing) {
		t.Errorf("waiting message %q does not name the image %s", w.Message, missing)
	}
	if bad.Status.Phase != corev1.PodPending {
		t.Errorf("pod with a missing image volume is %s, want Pending", bad.Status.Phase)
	}
	prefix := fmt.Sprintf("Failed to pull image %q: ", missing)
	s.Eventually("Failed event for the image volume's pull", time.Minute, func() (bool, string) {
		list, err := s.admin.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=missing-image"})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Reason == "Failed" && e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.Message, prefix) {
				t.Logf("event: %s", e.Message)
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
	})
}
