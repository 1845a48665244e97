package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

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

	// The Variable Expansion specs' pods: an emptyDir mounted whole and
	// again at a subPathExpr.
	subPathPod := func(name, cmd, expr string, env ...corev1.EnvVar) *corev1.Pod {
		p := s.Pod(name, corev1.RestartPolicyNever, cmd)
		p.Spec.Volumes = []corev1.Volume{{Name: "workdir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.Spec.Containers[0].Env = env
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
			{Name: "workdir", MountPath: "/subpath_mount", SubPathExpr: expr},
			{Name: "workdir", MountPath: "/volume_mount"},
		}
		return p
	}
	podName := corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}
	annotation := corev1.EnvVar{Name: "ANNOTATION", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['mysubpath']"}}}

	t.Run("subPathExpr from the pod name makes that directory in the volume", func(t *testing.T) {
		s.t = t
		p := subPathPod("subpath-name", "test -d /volume_mount/subpath-name; echo $?; touch /subpath_mount/f; stat -c %a /volume_mount/subpath-name", "$(POD_NAME)", podName)
		s.Create(p)
		s.WaitPod("default", "subpath-name", "Succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
		// The directory has the emptyDir's own mode, not the runtime's.
		if out := s.logs(t, "default", "subpath-name", "main"); out != "0\n777" {
			t.Fatalf("output %q, want the directory (0) with mode 777", out)
		}
		s.deletePod("subpath-name")
	})

	for _, tc := range []struct{ name, value, msg string }{
		{"subpath-absolute", "/tmp", "error SubPath `/tmp` must not be an absolute path"},
		{"subpath-backsteps", "..", "unable to provision SubPath `..`: must not contain '..'"},
	} {
		t.Run("subPathExpr expanding to "+tc.value+" is CreateContainerConfigError", func(t *testing.T) {
			s.t = t
			s.Create(subPathPod(tc.name, "true", "$(VALUE)", corev1.EnvVar{Name: "VALUE", Value: tc.value}))
			got := s.WaitPod("default", tc.name, "waiting with CreateContainerConfigError", func(p *corev1.Pod) bool {
				return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
					p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
			})
			if got.Status.Phase != corev1.PodPending {
				t.Errorf("phase %s, want Pending", got.Status.Phase)
			}
			if msg := got.Status.ContainerStatuses[0].State.Waiting.Message; msg != tc.msg {
				t.Errorf("waiting message %q, want %q", msg, tc.msg)
			}
			s.waitEvent(t, "default", tc.name, "Failed", "Error: "+tc.msg)
			s.deletePod(tc.name)
		})
	}

	t.Run("subPathExpr writes reach the volume; an annotation change leaves the container running", func(t *testing.T) {
		s.t = t
		p := subPathPod("subpath-write", "sleep 3600", "$(ANNOTATION)/$(POD_NAME)", podName, annotation)
		p.Annotations = map[string]string{"mysubpath": "mypath"}
		s.Create(p)
		got := s.WaitPod("default", "subpath-write", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
		s.execIn(got, "main", "touch", "/volume_mount/mypath/subpath-write/test.log")
		s.execIn(got, "main", "test", "-f", "/subpath_mount/test.log")
		s.update(t, "subpath-write", func(p *corev1.Pod) { p.Annotations["mysubpath"] = "mynewpath" })
		s.WaitPod("default", "subpath-write", "seen with the new annotation", func(p *corev1.Pod) bool { return p.Annotations["mysubpath"] == "mynewpath" })
		// A later sync must not restart or fail the running container.
		s.execIn(got, "main", "test", "-f", "/subpath_mount/test.log")
		if now, _ := s.Get("default", "subpath-write"); now.Status.Phase != corev1.PodRunning || now.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("after the update: phase %s, statuses %+v", now.Status.Phase, now.Status.ContainerStatuses)
		}
		s.deletePod("subpath-write")
	})

	t.Run("subPathExpr with an unset variable waits, and starts once the annotation is set", func(t *testing.T) {
		s.t = t
		p := subPathPod("subpath-late", "sleep 3600", "$(ANNOTATION)/$(POD_NAME)", podName, annotation)
		p.Annotations = map[string]string{"notmysubpath": "mypath"}
		s.Create(p)
		got := s.WaitPod("default", "subpath-late", "waiting with CreateContainerConfigError", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		if msg := got.Status.ContainerStatuses[0].State.Waiting.Message; got.Status.Phase != corev1.PodPending || msg != "missing value for ANNOTATION" {
			t.Fatalf("phase %s, waiting message %q; want Pending, %q", got.Status.Phase, msg, "missing value for ANNOTATION")
		}
		s.update(t, "subpath-late", func(p *corev1.Pod) { p.Annotations["mysubpath"] = "mypath" })
		running := s.WaitPod("default", "subpath-late", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
		s.execIn(running, "main", "test", "-d", "/volume_mount/mypath/subpath-late")
		s.deletePod("subpath-late")
	})
}

// waitEvent waits for an event on a pod with the reason and message.
func (s *stack) waitEvent(t *testing.T, ns, pod, reason, message string) {
	t.Helper()
	s.waitEventWhere(t, ns, pod, reason, message, func(m string) bool { return m == message })
}

// waitEventWhere waits, up to two minutes, for an event on a pod with the
// reason and a message match accepts; what names the message in a failure.
func (s *stack) waitEventWhere(t *testing.T, ns, pod, reason, what string, match func(message string) bool) {
	t.Helper()
	s.Eventually("event "+reason+" "+what, 2*time.Minute, func() (bool, string) {
		list, err := s.admin.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Reason == reason && match(e.Message) {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
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
