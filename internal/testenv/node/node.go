package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/registry"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Options tune Start.
type Options struct {
	// Args are extra flags per service, after the defaults Start gives.
	Args map[string][]string
	// ControlPlane is the cluster the node joins; nil means the package's
	// controlplane.Get(t) (etcd and apiserver only). Pass
	// controlplane.GetFull(t) for a node whose pods may come from
	// Deployments, Jobs and the scheduler.
	ControlPlane *controlplane.ControlPlane
	// KubeletConfig, when set, makes the node's configuration a
	// KubeletConfiguration (Config.KubeletConfig): it gets the node's
	// directory (Config) to place its paths in.
	KubeletConfig func(Config) *kubeletv1beta1.KubeletConfiguration
	// DataDirSize, when set (a tmpfs size such as "256m"), mounts a tmpfs
	// of that size on the node's data dir, so a test can fill the node's
	// disk without touching the host's.
	DataDirSize string
}

// Node is one running microlet node.
type Node struct {
	T testing.TB
	// Name is the node's name, "e2e-<random>".
	Name string
	// Dir holds run/, data/ (every service's state), manifests/, logs/
	// (the pod log root) and containers/ (the container log symlinks).
	Dir, RunDir, DataDir, ManifestDir, LogDir string
	// Instance labels the node's Docker objects.
	Instance string
	// CP is the control plane; Admin a system:masters client of it.
	CP    *controlplane.ControlPlane
	Admin kubernetes.Interface
	// Image is a busybox image the node can pull.
	Image string
	// Bins is the directory of the built binaries.
	Bins string
	// Out collects microlet's output (every service's log).
	Out *testenv.LockedBuffer

	proc *Process
	// tmpfs is the data dir's tmpfs mount point (Options.DataDirSize).
	tmpfs string
}

// Binaries builds microlet and every service once per test binary.
func Binaries(t testing.TB) string {
	t.Helper()
	return testenv.Build(t, nil, Packages()...)
}

// testArgs shorten podsyncd's waits so tests of restarts and resyncs finish
// in seconds.
var testArgs = map[string][]string{
	components.PodSyncd: {"--crashloop-backoff-initial=2s", "--crashloop-backoff-max=20s", "--resync-period=5s"},
}

// Start starts a node and waits until podsyncd serves and the Node is Ready.
// Everything is stopped and removed when the test ends.
func Start(t testing.TB, opts Options) *Node {
	t.Helper()
	cp := opts.ControlPlane
	if cp == nil {
		cp = controlplane.Get(t)
	}
	bins := Binaries(t)
	reg := registry.Start(t)
	ctx := context.Background()
	if err := cp.EnsureNamespace(ctx, metav1.NamespaceDefault); err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("/tmp", "e2e")
	if err != nil {
		t.Fatal(err)
	}
	name, out := "e2e-"+rand.String(5), &testenv.LockedBuffer{}
	cfg := Config{
		Name: name, Dir: dir, Bins: bins, Kubeconfig: cp.NodeKubeconfig(name),
		ClientCAFile: filepath.Join(cp.PKI().Dir, "ca.crt"), Instance: "e2e-" + rand.String(8),
		Args: map[string][]string{}, Out: out,
	}
	for svc, a := range testArgs {
		cfg.Args[svc] = append(cfg.Args[svc], a...)
	}
	for svc, extra := range opts.Args {
		cfg.Args[svc] = append(cfg.Args[svc], extra...)
	}
	if opts.KubeletConfig != nil {
		cfg.KubeletConfig = opts.KubeletConfig(cfg)
	}
	n := &Node{
		T: t, Name: name, Dir: dir, RunDir: cfg.RunDir(), DataDir: cfg.DataDir(), ManifestDir: cfg.ManifestDir(),
		LogDir: cfg.LogDir(), Instance: cfg.Instance, CP: cp, Admin: admin,
		Image: reg.Image(registry.Busybox), Bins: bins, Out: out,
	}
	if opts.DataDirSize != "" {
		if err := mountTmpfs(cfg.DataDir(), opts.DataDirSize); err != nil {
			_ = os.RemoveAll(dir)
			t.Fatal(err)
		}
		n.tmpfs = cfg.DataDir()
	}
	if n.proc, err = Launch(cfg); err != nil {
		n.unmount()
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := n.proc.WaitServing(wctx); err != nil {
		t.Fatalf("podsyncd never served: %v\n%s", err, n.Out.String())
	}
	n.WaitReady()
	n.waitKubeletPort()
	return n
}

// waitKubeletPort waits until the Node advertises the port nodeapi really
// serves: the API server reaches the kubelet API there (logs, exec, ...).
// nodestatusd learns it on its first sync after nodeapi listens.
func (n *Node) waitKubeletPort() {
	n.T.Helper()
	cc, err := grpcclient.Dial(components.Endpoint(n.RunDir, components.NodeAPI))
	if err != nil {
		n.T.Fatal(err)
	}
	defer cc.Close()
	api := nodeapiv1.NewNodeAPIServiceClient(cc)
	n.Eventually("the Node advertises nodeapi's port", 2*time.Minute, func() (bool, string) {
		return kubeletPortAdvertised(context.Background(), api, n.Admin, n.Name)
	})
}

// argsYAML renders the supervisor's per-service args, in a stable order.
func argsYAML(args map[string][]string) string {
	names := make([]string, 0, len(args))
	for n := range args {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("args:\n")
	for _, name := range names {
		quoted := make([]string, 0, len(args[name]))
		for _, a := range args[name] {
			quoted = append(quoted, fmt.Sprintf("%q", a))
		}
		fmt.Fprintf(&b, "  %s: [%s]\n", name, strings.Join(quoted, ", "))
	}
	return b.String()
}

func (n *Node) stop() {
	n.proc.Stop(60 * time.Second)
	if n.T.Failed() {
		out := n.Out.String()
		if len(out) > 60000 {
			out = out[len(out)-60000:]
		}
		n.T.Logf("microlet output (tail):\n%s", out)
	}
	RemoveDockerObjects(n.Instance)
	n.unmount()
	_ = os.RemoveAll(n.Dir)
}

// mountTmpfs mounts a tmpfs of size on dir, creating dir.
func mountTmpfs(dir, size string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0755"); err != nil {
		return fmt.Errorf("mount a %s tmpfs on %s: %w", size, dir, err)
	}
	return nil
}

// unmount unmounts the data dir's tmpfs, if Start mounted one.
func (n *Node) unmount() {
	if n.tmpfs == "" {
		return
	}
	if err := unix.Unmount(n.tmpfs, unix.MNT_DETACH); err != nil {
		n.T.Logf("unmount %s: %v", n.tmpfs, err)
	}
	n.tmpfs = ""
}

// RemoveDockerObjects deletes every container a shim labelled with
// instance, then the node's cgroup root (CgroupRoot) in every controller.
func RemoveDockerObjects(instance string) {
	out, err := exec.Command("docker", "ps", "-aq", "--filter", "label=io.microlet.instance="+instance).Output()
	if err != nil {
		return
	}
	if ids := strings.Fields(string(out)); len(ids) > 0 {
		_ = exec.Command("docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		_ = cgroups.RemovePath(filepath.Join("/sys/fs/cgroup", c.Name(), CgroupRoot(instance)))
	}
	_ = cgroups.RemovePath(filepath.Join("/sys/fs/cgroup", CgroupRoot(instance))) // cgroup v2
}

// WaitReady waits until the Node reports Ready.
func (n *Node) WaitReady() {
	n.T.Helper()
	n.Eventually("node Ready", 3*time.Minute, func() (bool, string) {
		return NodeReady(context.Background(), n.Admin, n.Name)
	})
}

// Eventually polls cond until it holds (ok), failing the test after limit
// with the last message.
func (n *Node) Eventually(what string, limit time.Duration, cond func() (bool, string)) {
	n.T.Helper()
	testenv.Eventually(n.T, what, limit, func() error {
		if ok, msg := cond(); !ok {
			return errors.New(msg)
		}
		return nil
	})
}

// Pod is a busybox pod bound to this node running script in container "main".
func (n *Node) Pod(name string, policy corev1.RestartPolicy, script string) *corev1.Pod {
	no := false
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name,
			RestartPolicy:                 policy,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: n.Image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", script},
			}},
		},
	}
}

// Create creates p in the API server.
func (n *Node) Create(p *corev1.Pod) *corev1.Pod {
	n.T.Helper()
	got, err := n.Admin.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		n.T.Fatal(err)
	}
	return got
}

// Get reads a pod from the API server.
func (n *Node) Get(ns, name string) (*corev1.Pod, error) {
	return n.Admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
}

// WaitPod waits until cond holds for the pod, and returns it.
func (n *Node) WaitPod(ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	n.T.Helper()
	var got *corev1.Pod
	n.Eventually(fmt.Sprintf("pod %s/%s %s", ns, name, what), 8*time.Minute, func() (bool, string) {
		p, err := n.Get(ns, name)
		if err != nil {
			return false, err.Error()
		}
		got = p
		return cond(p), fmt.Sprintf("phase=%s reason=%s containers=%+v", p.Status.Phase, p.Status.Reason, p.Status.ContainerStatuses)
	})
	return got
}

// WaitGone waits until the pod is deleted from the API server.
func (n *Node) WaitGone(ns, name string) {
	n.T.Helper()
	n.Eventually(fmt.Sprintf("pod %s/%s deleted", ns, name), 8*time.Minute, func() (bool, string) {
		_, err := n.Get(ns, name)
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprint(err)
	})
}

// Ready reports whether the pod's Ready condition is True.
func Ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PID is the process ID of `microlet run`.
func (n *Node) PID() int { return n.proc.PID() }
