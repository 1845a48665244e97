package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/test/cluster/dockerimage"
)

// webImage is the test's workload: Debian's static busybox serving its
// pod's name over HTTP on 8080, with nc and nslookup for the checks
// (Debian's static busybox wget segfaults, on this host too).
const webImage = "microlet.local/cluster-test-web:1"

func buildWebImage(ctx context.Context, t *testing.T) {
	t.Helper()
	data := map[string]dockerimage.File{"www/.keep": {}}
	for _, applet := range []string{"sh", "nc", "printf", "tail", "nslookup", "httpd", "hostname", "cat", "sleep", "echo"} {
		data["bin/"+applet] = dockerimage.File{Link: "busybox"}
	}
	_, err := dockerimage.Import(ctx, dockerimage.Spec{
		Name: webImage, Files: map[string]string{"bin/busybox": "/bin/busybox"}, Data: data,
		Changes: []string{dockerimage.EnvPath, `CMD ["/bin/sh", "-c", "hostname > /www/index.html; echo serving $(hostname); exec httpd -f -p 8080 -h /www"]`},
	}, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestTwoWorkerCluster brings up a control-plane node and two workers
// (containerd, microlet, the add-ons), then checks what a cluster user
// relies on: a Deployment spread over both workers; from a pod on one, the
// Service by its DNS name and the other's pod by IP; kubectl logs and exec
// on each; kubectl top nodes; kubectl drain moving a pod over through the
// eviction API; containerd killed under the pods and started again by the
// node, with the pods kept and a new one started; and Down leaving no
// container, network, volume or mount.
func TestTwoWorkerCluster(t *testing.T) {
	testenv.RequireRoot(t, "the cluster's node containers")
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.RequireOrSkip(t, "no docker: %v", err)
	}
	if _, err := controlplane.FindKubectl(); err != nil {
		testenv.RequireOrSkip(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	cfg := Config{Name: "mlt-" + rand.String(5), Workers: 2, Log: testWriter{t}}
	t.Cleanup(func() {
		if t.Failed() && os.Getenv("MICROLET_CLUSTER_KEEP") != "" {
			t.Logf("keeping cluster %s (MICROLET_CLUSTER_KEEP)", cfg.Name)
			return
		}
		if err := Down(context.Background(), cfg); err != nil {
			t.Errorf("down: %v", err)
		}
	})
	cl, err := Up(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cl.Client()
	if err != nil {
		t.Fatal(err)
	}
	a, b := cl.Nodes[1].Name, cl.Nodes[2].Name

	buildWebImage(ctx, t)
	if err := Load(ctx, cl.Config, webImage); err != nil {
		t.Fatal(err)
	}
	ns := "web"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createWeb(ctx, t, cs, ns)
	pods := waitWebPods(ctx, t, cs, ns, func(byNode map[string][]corev1.Pod) bool {
		return len(byNode[a]) == 1 && len(byNode[b]) == 1
	})
	podA, podB := pods[a][0], pods[b][0]
	t.Logf("web pods: %s on %s (%s), %s on %s (%s)", podA.Name, a, podA.Status.PodIP, podB.Name, b, podB.Status.PodIP)

	// From the pod on A: the Service by name (CoreDNS, kube-proxy), the
	// pod on B by its IP (podnet's routes across nodes).
	if out, err := cl.Kubectl(ctx, nil, "exec", "-n", ns, podA.Name, "--", "nslookup", "web."+ns+".svc."+ClusterDomain); err != nil || !strings.Contains(out, "Address") {
		t.Errorf("nslookup of the Service from %s: %v\n%s", a, err, out)
	}
	seen := map[string]bool{}
	for i := 0; i < 20 && len(seen) < 2; i++ {
		out, err := httpGet(ctx, cl, ns, podA.Name, "web."+ns+".svc."+ClusterDomain)
		if err != nil {
			t.Errorf("the Service by name from %s: %v", a, err)
			break
		}
		seen[strings.TrimSpace(out)] = true
	}
	if !seen[podB.Name] {
		t.Errorf("20 requests to the Service from %s reached %v, never %s on %s", a, keys(seen), podB.Name, b)
	}
	if out, err := httpGet(ctx, cl, ns, podA.Name, podB.Status.PodIP); err != nil || strings.TrimSpace(out) != podB.Name {
		t.Errorf("pod %s on %s by IP %s from %s: %q, %v", podB.Name, b, podB.Status.PodIP, a, out, err)
	}
	// kubectl logs and exec reach each node's kubelet API (nodeapi).
	for _, p := range []corev1.Pod{podA, podB} {
		if out, err := cl.Kubectl(ctx, nil, "logs", "-n", ns, p.Name); err != nil || !strings.Contains(out, "serving "+p.Name) {
			t.Errorf("kubectl logs %s on %s: %q, %v", p.Name, p.Spec.NodeName, out, err)
		}
		if out, err := cl.Kubectl(ctx, nil, "exec", "-n", ns, p.Name, "--", "cat", "/www/index.html"); err != nil || strings.TrimSpace(out) != p.Name {
			t.Errorf("kubectl exec %s on %s: %q, %v", p.Name, p.Spec.NodeName, out, err)
		}
	}
	// kubectl top nodes: metrics-server scrapes every node's
	// /metrics/resource; the first answer needs two scrapes.
	var top string
	deadline := time.Now().Add(3 * time.Minute)
	for {
		top, err = cl.Kubectl(ctx, nil, "top", "nodes", "--no-headers")
		if err == nil && len(strings.Split(strings.TrimSpace(top), "\n")) == len(cl.Nodes) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Second)
	}
	if err != nil || !strings.Contains(top, a) || !strings.Contains(top, b) {
		t.Errorf("kubectl top nodes: %v\n%s", err, top)
	}

	// Drain B: its pod is evicted (the eviction API) and comes back on A.
	out, err := cl.Kubectl(ctx, nil, "drain", b, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m")
	if err != nil || !strings.Contains(out, "pod/"+podB.Name+" evicted") {
		t.Errorf("kubectl drain %s: %v\n%s", b, err, out)
	}
	onA := waitWebPods(ctx, t, cs, ns, func(byNode map[string][]corev1.Pod) bool {
		return len(byNode[a]) == 2 && len(byNode[b]) == 0
	})[a]

	restartContainerd(ctx, t, cl, cs, ns, a, onA)

	if err := Down(ctx, cl.Config); err != nil {
		t.Fatal(err)
	}
	for _, what := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}, {"network", "ls", "-q"}} {
		if out, err := docker(ctx, append(what, "--filter", "label="+LabelCluster+"="+cfg.Name)...); err != nil || out != "" {
			t.Errorf("after Down, docker %s: %q %v", strings.Join(what, " "), out, err)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mounts), "\n") {
		if strings.Contains(l, cfg.Name) {
			t.Errorf("after Down, a mount remains: %s", l)
		}
	}
	if _, err := os.Stat(cfg.stateDir()); !os.IsNotExist(err) {
		t.Errorf("after Down, %s remains (%v)", cfg.stateDir(), err)
	}
}

// createWeb creates the web Deployment, two replicas spread one per
// schedulable node (DoNotSchedule, nodeTaintsPolicy Honor: the tainted
// control-plane node and a cordoned node are no domain), and its Service.
func createWeb(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, NodeTaintsPolicy: ptr.To(corev1.NodeInclusionPolicyHonor),
					}},
					Containers: []corev1.Container{{
						Name: "web", Image: webImage, ImagePullPolicy: corev1.PullNever,
						Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 2},
					}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitWebPods waits until the web pods that are Ready and not terminating
// satisfy ok, grouped by node, and returns them.
func waitWebPods(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string, ok func(map[string][]corev1.Pod) bool) map[string][]corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	var last string
	for {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		byNode := map[string][]corev1.Pod{}
		var states []string
		if err == nil {
			for _, p := range pods.Items {
				ready := false
				for _, c := range p.Status.Conditions {
					ready = ready || c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
				}
				states = append(states, fmt.Sprintf("%s on %q %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, ready))
				if ready && p.DeletionTimestamp == nil {
					byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
				}
			}
			if ok(byNode) {
				return byNode
			}
			last = strings.Join(states, "; ")
		}
		if time.Now().After(deadline) {
			t.Fatalf("web pods not as expected after 4m: %s (%v)", last, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// httpGet fetches / from host:8080 inside pod and returns the response
// body's last line (the serving pod's name).
func httpGet(ctx context.Context, cl *Cluster, ns, pod, host string) (string, error) {
	req := `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 ` + host + ` 8080 | tail -n 1`
	out, err := cl.Kubectl(ctx, nil, "exec", "-n", ns, pod, "--", "sh", "-c", req)
	if err == nil && strings.TrimSpace(out) == "" {
		err = fmt.Errorf("no answer from %s:8080", host)
	}
	return out, err
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// restartContainerd kills containerd on node (SIGKILL: the node's
// watchdog starts it again) under the Ready web pods running there, then
// checks what a user relies on after a runtime restart: the pods keep
// their containers and restart counts and stay Ready, exec into them
// works, a new pod starts on the node, and the Node is Ready.
func restartContainerd(ctx context.Context, t *testing.T, cl *Cluster, cs kubernetes.Interface, ns, node string, pods []corev1.Pod) {
	t.Helper()
	// The daemon's comm is "containerd"; its shims' are "containerd-shim",
	// and they, with the containers, outlive it.
	const kill = `for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = containerd ] && kill -9 "${p#/proc/}" && echo "${p#/proc/}"; done; true`
	pid, err := docker(ctx, "exec", node, "bash", "-c", kill)
	if err != nil || strings.TrimSpace(pid) == "" {
		t.Fatalf("killing containerd on %s: %q %v", node, pid, err)
	}
	t.Logf("containerd (pid %s) killed on %s", strings.TrimSpace(pid), node)
	testenv.Eventually(t, "containerd on "+node+" answers again", 2*time.Minute, func() error {
		_, err := docker(ctx, "exec", node, "ctr", "version")
		return err
	})
	if _, err := cs.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	after := waitWebPods(ctx, t, cs, ns, func(byNode map[string][]corev1.Pod) bool { return len(byNode[node]) == 3 })[node]
	now := map[string]corev1.Pod{}
	for _, p := range after {
		now[p.Name] = p
	}
	for _, p := range pods {
		q, ok := now[p.Name]
		if !ok {
			t.Errorf("pod %s is no longer Ready on %s after the containerd restart", p.Name, node)
			continue
		}
		was, is := p.Status.ContainerStatuses[0], q.Status.ContainerStatuses[0]
		if was.ContainerID != is.ContainerID || was.RestartCount != is.RestartCount {
			t.Errorf("pod %s: container %s (restarts %d) became %s (restarts %d) over the containerd restart",
				p.Name, was.ContainerID, was.RestartCount, is.ContainerID, is.RestartCount)
		}
		if out, err := cl.Kubectl(ctx, nil, "exec", "-n", ns, p.Name, "--", "cat", "/www/index.html"); err != nil || strings.TrimSpace(out) != p.Name {
			t.Errorf("kubectl exec %s after the containerd restart: %q, %v", p.Name, out, err)
		}
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Errorf("node %s is not Ready after the containerd restart: %s %s", node, c.Reason, c.Message)
		}
	}
}
