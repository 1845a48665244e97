package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/registry"
)

// TestPodFeatures runs issue 11's scenarios (probes, environment, volumes,
// security context) against one node stack.
func TestPodFeatures(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()
	webImage := strings.TrimSuffix(s.image, registry.Busybox) + registry.WebServer

	t.Run("httpGet readiness: Ready only once the server answers on the probed path", func(t *testing.T) {
		s.t = t
		p := s.Pod("ready-web", corev1.RestartPolicyAlways, "")
		c := &p.Spec.Containers[0]
		c.Image = webImage
		// The page the readiness probe asks for appears only after a while.
		c.Command = []string{"sh", "-c", "(sleep 15; echo ok > /www/ready.html) & exec httpd -f -p 80 -h /www"}
		c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}
		c.ReadinessProbe = &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/ready.html", Port: intstr.FromString("http"),
				HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "e2e"}},
			}},
			PeriodSeconds: 1, FailureThreshold: 1,
		}
		// A liveness probe that keeps succeeding must never restart it.
		c.LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
			PeriodSeconds: 2, FailureThreshold: 3,
		}
		s.Create(p)
		notReady := s.WaitPod("default", "ready-web", "Running, started and not Ready", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && len(p.Status.ContainerStatuses) == 1 &&
				p.Status.ContainerStatuses[0].State.Running != nil && !p.Status.ContainerStatuses[0].Ready && !ready(p)
		})
		if cond := condition(notReady, corev1.PodReady); cond == nil || cond.Reason != "ContainersNotReady" {
			t.Fatalf("Ready condition while the probe fails: %+v", cond)
		}
		got := s.WaitPod("default", "ready-web", "Ready", func(p *corev1.Pod) bool {
			return ready(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
		})
		if n := got.Status.ContainerStatuses[0].RestartCount; n != 0 {
			t.Fatalf("restartCount = %d with a passing liveness probe, want 0", n)
		}
		if out := s.execIn(got, "main", "cat", "/www/ready.html"); out != "ok\n" {
			t.Fatalf("probed page = %q", out)
		}
		s.deletePod("ready-web")
	})

	t.Run("failing exec liveness probe restarts the container", func(t *testing.T) {
		s.t = t
		p := s.Pod("live-exec", corev1.RestartPolicyAlways, "touch /tmp/healthy; sleep 8; rm /tmp/healthy; sleep 3600")
		p.Spec.Containers[0].LivenessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/healthy"}}},
			PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 5,
		}
		grace := int64(2)
		p.Spec.Containers[0].LivenessProbe.TerminationGracePeriodSeconds = &grace
		s.Create(p)
		got := s.WaitPod("default", "live-exec", "restarted after failing liveness", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1 &&
				p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
		})
		if term := got.Status.ContainerStatuses[0].LastTerminationState.Terminated; term.ExitCode == 0 {
			t.Fatalf("killed container reports exit code 0: %+v", term)
		}
		s.deletePod("live-exec")
	})

	t.Run("env from a configMap key, a secret key, envFrom, fieldRefs and resourceFieldRef", func(t *testing.T) {
		s.t = t
		cms := s.admin.CoreV1().ConfigMaps("default")
		if _, err := cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "env-config"},
			Data: map[string]string{"color": "blue", "size": "L"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.admin.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "env-secret"},
			Data: map[string][]byte{"password": []byte("hunter2")}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := s.Pod("env-pod", corev1.RestartPolicyAlways, "sleep 3600")
		p.Labels = map[string]string{"app": "envtest"}
		c := &p.Spec.Containers[0]
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
		ref := func(path string) *corev1.EnvVarSource {
			return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
		}
		c.EnvFrom = []corev1.EnvFromSource{{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env-config"}}}}
		c.Env = []corev1.EnvVar{
			{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "env-config"}, Key: "color"}}},
			{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "env-secret"}, Key: "password"}}},
			{Name: "POD_NAME", ValueFrom: ref("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: ref("metadata.namespace")},
			{Name: "POD_UID", ValueFrom: ref("metadata.uid")},
			{Name: "APP", ValueFrom: ref("metadata.labels['app']")},
			{Name: "NODE_NAME", ValueFrom: ref("spec.nodeName")},
			{Name: "POD_IP", ValueFrom: ref("status.podIP")},
			{Name: "CPU_MILLIS", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
			{Name: "GREETING", Value: "$(COLOR)-$(CFG_size)"},
		}
		created := s.Create(p)
		got := s.WaitPod("default", "env-pod", "Running", func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodRunning && ready(p) && p.Status.PodIP != ""
		})
		env := map[string]string{}
		for _, line := range strings.Split(s.execIn(got, "main", "env"), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		for k, want := range map[string]string{
			"COLOR": "blue", "PASSWORD": "hunter2", "CFG_color": "blue", "CFG_size": "L", "POD_NAME": "env-pod", "POD_NAMESPACE": "default",
			"POD_UID": string(created.UID), "APP": "envtest", "NODE_NAME": s.node, "POD_IP": got.Status.PodIP, "CPU_MILLIS": "100", "GREETING": "blue-L",
		} {
			if env[k] != want {
				t.Errorf("%s = %q inside the container, want %q", k, env[k], want)
			}
		}
		s.deletePod("env-pod")
	})

	t.Run("missing required configMap: CreateContainerConfigError, then starts once it exists", func(t *testing.T) {
		s.t = t
		p := s.Pod("late-config", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LATE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "late-config"}, Key: "value"}}}}
		s.Create(p)
		waiting := s.WaitPod("default", "late-config", "waiting with CreateContainerConfigError", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		if waiting.Status.Phase != corev1.PodPending {
			t.Fatalf("phase %s while the configMap is missing, want Pending", waiting.Status.Phase)
		}
		if msg := waiting.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "late-config") {
			t.Fatalf("waiting message %q does not name the configMap", msg)
		}
		if _, err := s.admin.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late-config"},
			Data: map[string]string{"value": "arrived"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := s.WaitPod("default", "late-config", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
		if out := s.execIn(got, "main", "sh", "-c", `echo "$LATE"`); out != "arrived\n" {
			t.Fatalf("LATE = %q", out)
		}
		s.deletePod("late-config")
	})

	t.Run("configMap, secret and downwardAPI volumes; a configMap change reaches the running pod", func(t *testing.T) {
		s.t = t
		cms := s.admin.CoreV1().ConfigMaps("default")
		if _, err := cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vol-config"},
			Data: map[string]string{"greeting": "hello", "other": "x"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.admin.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vol-secret"},
			Data: map[string][]byte{"token": []byte("s3cret")}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		mode := int32(0o400)
		tokenSeconds := int64(3600)
		p := s.Pod("vol-pod", corev1.RestartPolicyAlways, "sleep 3600")
		p.Labels = map[string]string{"tier": "backend"}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "vol-config"},
				Items: []corev1.KeyToPath{{Key: "greeting", Path: "conf/greeting.txt"}}}}},
			{Name: "sec", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol-secret", DefaultMode: &mode}}},
			{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
				{Path: "name", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &tokenSeconds}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "vol-config"},
					Items: []corev1.KeyToPath{{Key: "greeting", Path: "greeting"}}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}}},
		}
		p.Spec.ServiceAccountName = "default"
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
			{Name: "cfg", MountPath: "/etc/cfg"}, {Name: "sec", MountPath: "/etc/sec"}, {Name: "info", MountPath: "/etc/info"},
			{Name: "scratch", MountPath: "/scratch"}, {Name: "proj", MountPath: "/var/run/proj"},
			{Name: "cfg", MountPath: "/greeting-subpath", SubPath: "conf"},
		}
		s.Create(p)
		got := s.WaitPod("default", "vol-pod", "Running", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && ready(p) })
		for file, want := range map[string]string{
			"/etc/cfg/conf/greeting.txt": "hello", "/etc/sec/token": "s3cret", "/etc/info/name": "vol-pod", "/etc/info/labels": `tier="backend"`,
			"/var/run/proj/greeting": "hello", "/var/run/proj/namespace": "default", "/greeting-subpath/greeting.txt": "hello",
		} {
			if out := s.execIn(got, "main", "cat", file); out != want {
				t.Errorf("%s = %q, want %q", file, out, want)
			}
		}
		if tok := s.execIn(got, "main", "cat", "/var/run/proj/token"); strings.Count(tok, ".") != 2 || !strings.HasPrefix(tok, "eyJ") {
			t.Errorf("projected service-account token is not a JWT: %q", tok)
		}
		if out := s.execIn(got, "main", "stat", "-L", "-c", "%a", "/etc/sec/token"); strings.TrimSpace(out) != "400" {
			t.Errorf("secret file mode %q, want 400", out)
		}
		if out := s.execIn(got, "main", "sh", "-c", "touch /etc/cfg/new 2>&1 || echo read-only"); !strings.Contains(out, "read-only") && !strings.Contains(out, "Read-only") {
			t.Errorf("configMap volume is writable: %q", out)
		}
		s.execIn(got, "main", "sh", "-c", "echo data > /scratch/f && cat /scratch/f")
		cm, err := cms.Get(context.Background(), "vol-config", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["greeting"] = "updated"
		if _, err := cms.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		s.Eventually("configMap update visible in the running container", 8*time.Minute, func() (bool, string) {
			out := s.execIn(got, "main", "cat", "/etc/cfg/conf/greeting.txt")
			return out == "updated", out
		})
		s.deletePod("vol-pod")
	})

	t.Run("runAsNonRoot with a root image is refused with upstream's message", func(t *testing.T) {
		s.t = t
		yes := true
		p := s.Pod("nonroot", corev1.RestartPolicyAlways, "sleep 3600")
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes}
		created := s.Create(p)
		got := s.WaitPod("default", "nonroot", "refused with CreateContainerConfigError", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
				p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError"
		})
		want := fmt.Sprintf("container has runAsNonRoot and image will run as root (pod: %q, container: main)", "nonroot_default("+string(created.UID)+")")
		if msg := got.Status.ContainerStatuses[0].State.Waiting.Message; msg != want {
			t.Fatalf("message %q, want %q", msg, want)
		}
		if n := s.dockerRunning(string(created.UID)); n != 0 {
			t.Fatalf("%d containers running for a refused pod", n)
		}
		s.deletePod("nonroot")
	})
}

func condition(p *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// deletePod deletes a default-namespace pod at once and waits until it is gone.
func (s *stack) deletePod(name string) {
	s.t.Helper()
	zero := int64(0)
	if err := s.admin.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		s.t.Fatal(err)
	}
	s.WaitGone("default", name)
}

// execIn runs a command in a pod's running container through the stack's CRI
// socket (ExecSync) and returns its stdout; a non-zero exit fails the test.
func (s *stack) execIn(p *corev1.Pod, container string, cmd ...string) string {
	s.t.Helper()
	resp := s.execSync(p, container, cmd...)
	if resp.ExitCode != 0 {
		s.t.Fatalf("ExecSync %v exited %d: %s%s", cmd, resp.ExitCode, resp.Stdout, resp.Stderr)
	}
	return string(resp.Stdout)
}

// execCode runs a command in a pod's container through the CRI and returns
// its combined output and exit code.
func (s *stack) execCode(p *corev1.Pod, container string, cmd ...string) (string, int32) {
	s.t.Helper()
	resp := s.execSync(p, container, cmd...)
	return string(resp.Stdout) + string(resp.Stderr), resp.ExitCode
}

// execSync runs a command in a pod's container through the stack's CRI
// socket; only a failed call fails the test.
func (s *stack) execSync(p *corev1.Pod, container string, cmd ...string) *runtimeapi.ExecSyncResponse {
	s.t.Helper()
	id := ""
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == container {
			id = cs.ContainerID[strings.Index(cs.ContainerID, "://")+3:]
		}
	}
	if id == "" {
		s.t.Fatalf("pod %s has no container %s", p.Name, container)
	}
	ctx, rt, done := s.runtimeClient(60 * time.Second)
	defer done()
	resp, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: 30})
	if err != nil {
		s.t.Fatalf("ExecSync %v: %v", cmd, err)
	}
	return resp
}
