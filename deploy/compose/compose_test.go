package compose

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// nodeServices are the long-running containers besides the control plane.
// One per service of internal/components, named like it.
var nodeServices = func() []string {
	out := make([]string, 0, len(components.All))
	for _, c := range components.All {
		out = append(out, c.Name)
	}
	return out
}()

// composeCmd finds `docker compose` (v2) or Debian's docker-compose (v1).
func composeCmd() []string {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	return nil
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freePorts returns n loopback ports nobody listened on a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// box is one compose project under test.
type box struct {
	compose []string
	file    string
	project string
	env     []string
}

func (b *box) run(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append(append(append([]string{}, b.compose[1:]...), "-f", b.file, "-p", b.project), args...)
	cmd := exec.CommandContext(ctx, b.compose[0], full...)
	cmd.Env = append(os.Environ(), b.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", strings.Join(b.compose, " "), strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

func docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// states maps each service of the project to its container's state:
// "running healthy", "running starting", "exited 0", ... (one docker call).
func (b *box) states() map[string]string {
	out, err := docker("ps", "-a", "--filter", "label=com.docker.compose.project="+b.project,
		"--filter", "label=com.docker.compose.oneoff=False", "--format", "{{.ID}}")
	m := map[string]string{}
	if err != nil || out == "" {
		return m
	}
	ids := strings.Fields(out)
	args := append([]string{"inspect", "-f",
		`{{index .Config.Labels "com.docker.compose.service"}}|{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.ExitCode}}{{end}}`}, ids...)
	out, err = docker(args...)
	if err != nil {
		return m
	}
	for _, line := range strings.Split(out, "\n") {
		if svc, st, ok := strings.Cut(line, "|"); ok {
			m[svc] = st
		}
	}
	return m
}

// TestComposeDevBox builds the images under a test tag, brings the dev box up
// under its own project name, ports and node name, and checks:
//   - the credentials and bootstrap steps exited 0 (the apiserver's kubelet
//     client may use nodes' API) and every other container is healthy
//     (its healthcheck is `microlet health <service>` or a devbox probe);
//   - runtime-shim, nodestatusd, podconfig and statusd answer their APIs
//     on the sockets volume;
//   - the Node is registered in the compose control plane and its Lease is
//     renewed;
//   - a static pod dropped into the manifest dir gets its mirror pod, and a
//     Deployment's pod runs on the node;
//   - `down` leaves no container, network or volume of the project.
//
// Every check holds or fails the test. It needs root, to reach the
// sockets through the volume's directory on the host.
func TestComposeDevBox(t *testing.T) {
	testenv.RequireRoot(t, "reaching the services' sockets through the sockets volume's directory")
	if out, err := docker("info", "-f", "{{.ServerVersion}}"); err != nil {
		testenv.RequireOrSkip(t, "no Docker engine: %v %s", err, out)
	}
	compose := composeCmd()
	if compose == nil {
		testenv.RequireOrSkip(t, "neither `docker compose` nor docker-compose is installed (apt-get install docker-compose)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	suffix := randomSuffix()
	tag := "composetest-" + suffix
	node := "compose-test-" + suffix
	t.Cleanup(func() {
		for _, img := range append([]string{"controlplane"}, nodeServices...) {
			_, _ = docker("rmi", "microlet/"+img+":"+tag)
		}
	})
	build := exec.Command("bash", filepath.Join(root, "hack/build-images.sh"), tag)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build images: %v\n%s", err, out)
	}

	// Pods the dev box ran are Docker containers outside the project,
	// labelled with runtime-shim's instance (the node name).
	t.Cleanup(func() {
		if ids, _ := docker("ps", "-aq", "--filter", "label=io.microlet.instance="+node); ids != "" {
			_, _ = docker(append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
		}
	})

	manifests := t.TempDir()
	// podsyncd's data dir is a host directory at the same path inside
	// (pods bind-mount what it prepares there); the containers write it
	// as root, so it is removed by hand, after down.
	podsyncdDir, err := os.MkdirTemp("/tmp", "composetest-podsyncd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(podsyncdDir) })
	ports := freePorts(t, 6)
	b := &box{
		compose: compose,
		file:    filepath.Join(root, "deploy/compose/docker-compose.yaml"),
		project: "microlettest" + suffix,
		env: []string{
			"MICROLET_IMAGE_TAG=" + tag,
			"MICROLET_NODE_NAME=" + node,
			fmt.Sprintf("MICROLET_APISERVER_PORT=%d", ports[0]),
			fmt.Sprintf("MICROLET_ETCD_PORT=%d", ports[1]),
			fmt.Sprintf("MICROLET_ETCD_PEER_PORT=%d", ports[2]),
			fmt.Sprintf("MICROLET_KUBELET_PORT=%d", ports[3]),
			fmt.Sprintf("MICROLET_SCHEDULER_PORT=%d", ports[4]),
			fmt.Sprintf("MICROLET_CONTROLLER_MANAGER_PORT=%d", ports[5]),
			"MICROLET_MANIFEST_DIR=" + manifests,
			"MICROLET_PODSYNCD_DIR=" + podsyncdDir,
		},
	}
	downDone := false
	down := func() {
		if downDone {
			return
		}
		downDone = true
		if out, err := b.run(5*time.Minute, "down", "-v", "--remove-orphans", "-t", "20"); err != nil {
			t.Errorf("down: %v\n%s", err, out)
		}
	}
	t.Cleanup(down)

	if out, err := b.run(10*time.Minute, "up", "-d"); err != nil {
		logs, _ := b.run(time.Minute, "logs", "--tail=30")
		t.Fatalf("up: %v\n%s\n%s", err, out, logs)
	}

	sockets, err := docker("volume", "inspect", "-f", "{{.Mountpoint}}", b.project+"_sockets")
	if err != nil {
		t.Fatalf("sockets volume: %v %s", err, sockets)
	}
	// The sockets are reachable from the host (as root) through the
	// volume's directory. serves waits until svc answers call without an
	// error, and fails the test when it does not within ctx.
	serves := func(ctx context.Context, svc string, call func(context.Context, *grpc.ClientConn) error) {
		t.Helper()
		sock := map[string]string{"runtime-shim": "runtime.sock"}[svc]
		if sock == "" {
			sock = svc + ".sock"
		}
		waitFor(ctx, t, svc+" answers its API", func() error {
			cc, err := grpcclient.Dial(filepath.Join(sockets, sock))
			if err != nil {
				return err
			}
			defer cc.Close()
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return call(cctx, cc)
		})
	}

	// Every container healthy; the credentials step done.
	want := append([]string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "node-credentials"}, nodeServices...)
	var bad []string
	defer func() {
		if len(bad) > 0 {
			logs, _ := b.run(time.Minute, "logs", "--tail=30")
			t.Logf("compose logs:\n%s", logs)
		}
	}()
	testenv.EventuallyEvery(t, "every container healthy", 5*time.Minute, 2*time.Second, func() error {
		bad = nil
		states := b.states()
		for _, oneShot := range []string{"credentials", "bootstrap"} {
			if st := states[oneShot]; st != "exited 0" {
				bad = append(bad, oneShot+": "+st)
			}
		}
		for _, svc := range want {
			if st := states[svc]; st != "running healthy" {
				bad = append(bad, svc+": "+st)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("%v", bad)
		}
		return nil
	})
	kcfg, err := b.run(time.Minute, "run", "--rm", "credentials", "cat", "admin.kubeconfig")
	if err != nil {
		t.Fatalf("read the admin kubeconfig: %v", err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(kcfg))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatalf("the compose apiserver does not answer: %v", err)
	}
	// The bootstrap step let the apiserver's kubelet client into nodes' API.
	sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: controlplane.KubeletClientUser, Groups: []string{controlplane.KubeletClientGroup},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "nodes", Subresource: "proxy", Name: node},
	}}, metav1.CreateOptions{})
	if err != nil || !sar.Status.Allowed {
		t.Errorf("the kubelet client may not use %s's kubelet API: %v %+v", node, err, sar)
	}
	// The controller manager works: a new namespace gets its default
	// ServiceAccount from it (nothing else creates one there).
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "compose-test"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "default ServiceAccount of a new namespace", func() error {
		_, err := cs.CoreV1().ServiceAccounts("compose-test").Get(ctx, "default", metav1.GetOptions{})
		return err
	})

	// The node joined with the bootstrap token: its client certificate came
	// from a CSR the token made, approved and signed by the controller manager.
	waitFor(ctx, t, "the node's certificate requested with the bootstrap token", func() error {
		list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, c := range list.Items {
			if strings.HasPrefix(c.Spec.Username, "system:bootstrap:") && len(c.Status.Certificate) > 0 {
				return nil
			}
		}
		return fmt.Errorf("%d CSRs, none issued to a bootstrap token", len(list.Items))
	})

	serves(ctx, "runtime-shim", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := runtimeapi.NewRuntimeServiceClient(cc).Version(ctx, &runtimeapi.VersionRequest{})
		return err
	})
	serves(ctx, "nodestatusd", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := nodestatusv1.NewNodeStatusServiceClient(cc).GetNode(ctx, &nodestatusv1.GetNodeRequest{})
		return err
	})
	waitFor(ctx, t, "Node "+node+" registered", func() error {
		_, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err
	})
	var first *metav1.MicroTime
	waitFor(ctx, t, "Lease of "+node+" renewed", func() error {
		l, err := cs.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil {
			return fmt.Errorf("no renewTime yet")
		}
		if first == nil {
			first = l.Spec.RenewTime.DeepCopy()
			return fmt.Errorf("first renewTime %s", first)
		}
		if !l.Spec.RenewTime.After(first.Time) {
			return fmt.Errorf("renewTime still %s", l.Spec.RenewTime)
		}
		return nil
	})

	serves(ctx, "podconfig", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := podconfigv1.NewPodConfigServiceClient(cc).ListPods(ctx, &podconfigv1.ListPodsRequest{})
		return err
	})
	serves(ctx, "statusd", func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := statusdv1.NewStatusServiceClient(cc).ListPodStatuses(ctx, &statusdv1.ListPodStatusesRequest{})
		return err
	})
	// The image need not exist: the mirror pod mirrors the manifest.
	manifest := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-web\nspec:\n  containers:\n  - name: web\n    image: microlet.local/compose-test-absent:1\n"
	if err := os.WriteFile(filepath.Join(manifests, "static-web.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	mirror := "static-web-" + node
	waitFor(ctx, t, "mirror pod "+mirror, func() error {
		p, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, mirror, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, ok := p.Annotations["kubernetes.io/config.mirror"]; !ok {
			return fmt.Errorf("pod %s has no kubernetes.io/config.mirror annotation", mirror)
		}
		return nil
	})
	// Remove it again so the pod's containers are gone before down.
	if err := os.Remove(filepath.Join(manifests, "static-web.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "mirror pod "+mirror+" deleted", func() error {
		_, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, mirror, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})

	deploymentRuns(ctx, t, cs, node)

	down()
	label := "label=com.docker.compose.project=" + b.project
	for _, kind := range []string{"container", "network", "volume"} {
		args := []string{kind, "ls", "-q", "--filter", label}
		if kind == "container" {
			args = []string{"ps", "-a", "-q", "--filter", label}
		}
		out, err := docker(args...)
		if err != nil {
			t.Fatalf("docker %v: %v %s", args, err, out)
		}
		if out != "" {
			t.Errorf("down left %s(s) of project %s: %s", kind, b.project, out)
		}
	}
	// Volumes made by compose v1 carry the project label too, but check the
	// names as well in case a compose version does not label them.
	for _, v := range []string{"sockets", "creds", "data", "logs", "etcd"} {
		if out, err := docker("volume", "inspect", b.project+"_"+v); err == nil {
			t.Errorf("down left volume %s_%s: %s", b.project, v, out)
		}
	}
}

// waitFor polls cond every 2 s (each check runs docker or gRPC calls) until
// it returns nil, failing the test when ctx's deadline passes first.
func waitFor(ctx context.Context, t *testing.T, what string, cond func() error) {
	t.Helper()
	deadline, ok := ctx.Deadline()
	if !ok {
		t.Fatalf("waitFor %s: the context has no deadline", what)
	}
	testenv.EventuallyEvery(t, what, time.Until(deadline), 2*time.Second, cond)
	t.Logf("ok: %s", what)
}

// TestComposeKubeletFlags keeps the compose apiserver a kubelet API client
// exactly like the test control plane (no Docker needed): the same
// controlplane.KubeletClientFlags over the creds volume, no serving-CA
// check, and the bootstrap step ahead of the node services.
func TestComposeKubeletFlags(t *testing.T) {
	data, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Command   []string `yaml:"command"`
			DependsOn map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	api := file.Services["kube-apiserver"].Command
	for _, flag := range controlplane.KubeletClientFlags("/creds", false) {
		if !slices.Contains(api, flag) {
			t.Errorf("kube-apiserver lacks %s", flag)
		}
	}
	for _, flag := range api {
		if strings.HasPrefix(flag, "--kubelet-certificate-authority") {
			t.Errorf("kube-apiserver has %s: nodes serve self-signed certificates by default", flag)
		}
	}
	if cmd := file.Services["bootstrap"].Command; len(cmd) == 0 || cmd[0] != "bootstrap" {
		t.Errorf("bootstrap service command %v", cmd)
	}
	if c := file.Services["node-credentials"].DependsOn["bootstrap"].Condition; c != "service_completed_successfully" {
		t.Errorf("node-credentials does not wait for the bootstrap step (condition %q)", c)
	}
	// The node joins with a bootstrap token; the services start with the
	// kubeconfig node-credentials wrote.
	if !slices.Contains(api, "--enable-bootstrap-token-auth=true") {
		t.Error("kube-apiserver does not authenticate bootstrap tokens")
	}
	for _, svc := range []string{"podconfig", "cloudsyncd", "runtime-shim"} {
		if c := file.Services[svc].DependsOn["node-credentials"].Condition; c != "service_healthy" {
			t.Errorf("%s does not wait for node-credentials (condition %q)", svc, c)
		}
	}
	for _, svc := range nodeServices {
		if !slices.Contains(file.Services[svc].Command, "--kubeconfig=/var/lib/microlet/node.kubeconfig") {
			t.Errorf("%s does not use the kubeconfig node-credentials writes", svc)
		}
	}
}

// TestComposeComponentFlags keeps the compose scheduler and controller
// manager configured like the test control plane's (no Docker needed):
// controlplane.SchedulerFlags and ControllerManagerFlags over the creds
// volume, loopback HTTPS, started once the apiserver is healthy.
func TestComposeComponentFlags(t *testing.T) {
	data, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			Entrypoint []string `yaml:"entrypoint"`
			Command    []string `yaml:"command"`
			DependsOn  map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	for name, flags := range map[string][]string{
		controlplane.KubeScheduler:         controlplane.SchedulerFlags("/creds", "/creds/"+controlplane.ComponentKubeconfigFile(controlplane.KubeScheduler)),
		controlplane.KubeControllerManager: controlplane.ControllerManagerFlags("/creds", "/creds/"+controlplane.ComponentKubeconfigFile(controlplane.KubeControllerManager)),
	} {
		svc, ok := file.Services[name]
		if !ok {
			t.Errorf("no %s service", name)
			continue
		}
		if len(svc.Entrypoint) != 1 || svc.Entrypoint[0] != "/usr/local/bin/"+name {
			t.Errorf("%s entrypoint %v", name, svc.Entrypoint)
		}
		for _, f := range append(flags, "--bind-address=127.0.0.1") {
			if !slices.Contains(svc.Command, f) {
				t.Errorf("%s lacks %s", name, f)
			}
		}
		if c := svc.DependsOn["kube-apiserver"].Condition; c != "service_healthy" {
			t.Errorf("%s does not wait for a healthy apiserver (condition %q)", name, c)
		}
	}
}

// deploymentRuns: a Deployment's pod is scheduled to the dev box's node
// and runs there (with its service-account token volume and managed
// /etc/hosts, which the host's Docker mounts from podsyncd's directory),
// then goes away with the Deployment. The image is the pause image
// runtime-shim makes sure of, so nothing needs pulling.
func deploymentRuns(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	sel := map[string]string{"app": "compose-web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "compose-web", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "microlet.local/pause:1.0", ImagePullPolicy: corev1.PullIfNotPresent,
				}}},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(dep.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := func() ([]corev1.Pod, error) {
		l, err := cs.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=compose-web"})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	waitFor(ctx, t, "the Deployment's pod running on "+node, func() error {
		ps, err := pods()
		if err != nil {
			return err
		}
		if len(ps) != 1 {
			return fmt.Errorf("%d pods", len(ps))
		}
		p := ps[0]
		if p.Spec.NodeName != node || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s on %q, phase %s, %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.ContainerStatuses)
		}
		return nil
	})
	if err := cs.AppsV1().Deployments(dep.Namespace).Delete(ctx, dep.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "the Deployment's pod gone", func() error {
		ps, err := pods()
		if err != nil {
			return err
		}
		if len(ps) > 0 {
			return fmt.Errorf("%d pods left", len(ps))
		}
		return nil
	})
}

// TestComposeDependsOnFollowsComponents keeps each node service's depends_on
// what internal/components says it needs, each healthy first; a service that
// needs none waits for node-credentials (the x-node default, which a
// service's own depends_on replaces).
func TestComposeDependsOnFollowsComponents(t *testing.T) {
	data, err := os.ReadFile("docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Services map[string]struct {
			DependsOn map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	for _, c := range components.All {
		svc, ok := file.Services[c.Name]
		if !ok {
			t.Errorf("no %s service", c.Name)
			continue
		}
		want := slices.Clone(c.Needs)
		if len(want) == 0 {
			want = []string{"node-credentials"}
		}
		slices.Sort(want)
		var got []string
		for name, dep := range svc.DependsOn {
			got = append(got, name)
			if dep.Condition != "service_healthy" {
				t.Errorf("%s depends on %s with condition %q, want service_healthy", c.Name, name, dep.Condition)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s depends_on %v, components says %v", c.Name, got, want)
		}
	}
}
