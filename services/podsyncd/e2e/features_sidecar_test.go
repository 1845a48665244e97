package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// sidecarScript is a busybox HTTP server on 8080 whose CGI appends
// "hook <query>" to the shared log, so every probe and hook that reaches it
// is recorded in order. It waits a little before serving so the startup
// probe fails first, and records its own start and TERM.
const sidecarScript = `echo sidecar-start >> /shared/log
mkdir -p /www/cgi-bin
cat > /www/cgi-bin/hook <<'EOF'
#!/bin/sh
echo "hook $QUERY_STRING" >> /shared/log
printf 'Content-Type: text/plain\r\n\r\nok\n'
EOF
chmod +x /www/cgi-bin/hook
trap 'echo sidecar-term >> /shared/log; exit 0' TERM
sleep 2
httpd -f -p 8080 -h /www &
wait`

// appScript records the container's start and TERM under its name.
func appScript(name string) string {
	return `echo ` + name + `-start >> /shared/log
trap 'echo ` + name + `-term >> /shared/log; exit 0' TERM
sleep 3600 &
wait`
}

// TestSidecarHooks proves on the real stack what the conformance "Container
// Lifecycle Hook" specs rely on: a restartable init container (sidecar) with
// a startup probe starts first and the app containers only once its probe
// passed; postStart hooks (httpGet without a host, so the pod IP, and exec)
// reach the sidecar before the app container is reported Running; the pod
// becomes Ready; on deletion the preStop hooks (httpGet and exec) reach the
// sidecar before the app containers stop, and the sidecar stops after them.
func TestSidecarHooks(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()

	dir := t.TempDir()
	logFile := filepath.Join(dir, "log")
	always := corev1.ContainerRestartPolicyAlways
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	shared := []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}}
	hook := func(msg string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/cgi-bin/hook?msg=" + msg, Port: intstr.FromInt32(8080)}}
	}
	execHook := func(msg string) *corev1.LifecycleHandler {
		return &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"sh", "-c",
			"wget -q -O- \"http://$POD_IP:8080/cgi-bin/hook?msg=" + msg + "\""}}}
	}

	p := s.Pod("sidecar-hooks", corev1.RestartPolicyAlways, appScript("http"))
	p.Spec.Volumes = []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirOrCreate}}}}
	app := &p.Spec.Containers[0]
	app.Name = "http"
	app.VolumeMounts = shared
	app.Lifecycle = &corev1.Lifecycle{PostStart: hook("poststart"), PreStop: hook("prestop")}
	execApp := *app.DeepCopy()
	execApp.Name = "exec"
	execApp.Command = []string{"/bin/sh", "-c", appScript("exec")}
	execApp.Env = []corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	execApp.Lifecycle = &corev1.Lifecycle{PostStart: execHook("poststart-exec"), PreStop: execHook("prestop-exec")}
	p.Spec.Containers = append(p.Spec.Containers, execApp)
	p.Spec.InitContainers = []corev1.Container{{
		Name: "sidecar", Image: s.image, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:       []string{"/bin/sh", "-c", sidecarScript},
		RestartPolicy: &always,
		VolumeMounts:  shared,
		StartupProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/cgi-bin/hook?msg=startup", Port: intstr.FromInt32(8080)}},
			PeriodSeconds:    1,
			FailureThreshold: 60,
		},
	}}
	s.Create(p)

	readLog := func() []string {
		b, err := os.ReadFile(logFile)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return strings.Fields(strings.ReplaceAll(string(b), "hook msg=", "hook:"))
	}
	index := func(lines []string, what string) int {
		for i, l := range lines {
			if l == what {
				return i
			}
		}
		return -1
	}

	// The first status that shows an app container running already has its
	// postStart hook's request in the log: the hook ran before Running.
	running := s.WaitPod("default", p.Name, "app containers running", func(p *corev1.Pod) bool {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running != nil {
				return true
			}
		}
		return false
	})
	lines := readLog()
	for _, cs := range running.Status.ContainerStatuses {
		want := map[string]string{"http": "hook:poststart", "exec": "hook:poststart-exec"}[cs.Name]
		if cs.State.Running != nil && index(lines, want) < 0 {
			t.Errorf("container %s reported Running before its postStart hook reached the sidecar; log %q", cs.Name, lines)
		}
	}

	got := s.WaitPod("default", p.Name, "ready", ready)
	if len(got.Status.InitContainerStatuses) != 1 {
		t.Fatalf("init container statuses %+v", got.Status.InitContainerStatuses)
	}
	if sc := got.Status.InitContainerStatuses[0]; sc.State.Running == nil || sc.Started == nil || !*sc.Started || !sc.Ready {
		t.Errorf("sidecar status %+v, want running, started and ready", sc)
	}
	lines = readLog()
	sidecarStart, startup := index(lines, "sidecar-start"), index(lines, "hook:startup")
	if sidecarStart != 0 || startup < 0 {
		t.Fatalf("sidecar did not start first and pass its startup probe; log %q", lines)
	}
	for _, want := range []string{"http-start", "exec-start", "hook:poststart", "hook:poststart-exec"} {
		if i := index(lines, want); i < startup {
			t.Errorf("%s at %d, want after the sidecar's startup probe passed (%d); log %q", want, i, startup, lines)
		}
	}

	grace := int64(15)
	if err := s.admin.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	s.WaitGone("default", p.Name)
	lines = readLog()
	t.Logf("sidecar log: %q", lines)
	sidecarTerm := index(lines, "sidecar-term")
	if sidecarTerm < 0 {
		t.Errorf("sidecar never got TERM; log %q", lines)
	}
	for _, c := range []struct{ hook, term string }{{"hook:prestop", "http-term"}, {"hook:prestop-exec", "exec-term"}} {
		h, term := index(lines, c.hook), index(lines, c.term)
		if h < 0 || term < 0 || h > term {
			t.Errorf("preStop %s (%d) must reach the sidecar before %s (%d); log %q", c.hook, h, c.term, term, lines)
		}
		if term > sidecarTerm {
			t.Errorf("%s (%d) after sidecar-term (%d): the sidecar must stop last; log %q", c.term, term, sidecarTerm, lines)
		}
	}
}
