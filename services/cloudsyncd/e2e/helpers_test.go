package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// buildFlags gets -race from race_test.go when the tests run with it, so the
// binaries under test are checked too.
var buildFlags []string

const (
	cloudsyncdPkg = "github.com/microlet/microlet/services/cloudsyncd"
	pluginPkg     = "github.com/microlet/microlet/examples/cloudprovider-external"
	// controllersUser is the identity the controllers run as, bound to the
	// ClusterRole shipped in deploy/.
	controllersUser = "cloudsyncd-e2e"
	lbFinalizer     = "service.kubernetes.io/load-balancer-cleanup"
	uninitialized   = "node.cloudprovider.kubernetes.io/uninitialized"
	shutdownTaint   = "node.cloudprovider.kubernetes.io/shutdown"
)

// wait bounds every eventually: generous, the machine is shared and loaded.
const wait = 4 * time.Minute

func bin(t *testing.T, pkg string) string {
	t.Helper()
	dir := testenv.Build(t, buildFlags, cloudsyncdPkg, pluginPkg)
	return filepath.Join(dir, filepath.Base(pkg))
}

// eventually polls f until it returns nil, for up to wait.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, wait, f)
}

// rbacKubeconfig binds the ClusterRole of deploy/cloudsyncd-controllers-rbac.yaml
// to a client-certificate user and returns that user's kubeconfig: the
// controllers run with exactly what the project tells people to grant.
func rbacKubeconfig(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "deploy", "cloudsyncd-controllers-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx := context.Background()
	var role *rbacv1.ClusterRole
	for doc := range strings.SplitSeq(string(data), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind == "ClusterRole" {
			role = &rbacv1.ClusterRole{}
			if err := yaml.UnmarshalStrict([]byte(doc), role); err != nil {
				t.Fatal(err)
			}
		}
	}
	if role == nil {
		t.Fatal("no ClusterRole in deploy/cloudsyncd-controllers-rbac.yaml")
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cloudsyncd-e2e"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: controllersUser}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	path := filepath.Join(cp.Dir(), "kubeconfig", controllersUser+".kubeconfig")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	cert, key, err := cp.PKI().ClientCert(controllersUser)
	if err != nil {
		t.Fatal(err)
	}
	if err := controlplane.WriteKubeconfig(path, cp.Host(), cp.PKI().CACertPEM, controllersUser, cert, key, ""); err != nil {
		t.Fatal(err)
	}
	return path
}

// proc is a child process whose output the test keeps.
type proc struct {
	*testenv.Process
	sock string // cloudsyncd's socket, for cloudsyncd processes
}

// run starts a child; it is stopped (SIGTERM, then SIGKILL) when the test
// ends and its output printed if the test failed. A data race the race
// detector reports in microlet's code fails the test.
func run(t *testing.T, name, path string, args ...string) *proc {
	t.Helper()
	p := &proc{Process: testenv.StartProcess(t, name, path, args...)}
	// Cleanups run last-registered first: stop the process here so the
	// reports it prints on its way out are in its output.
	t.Cleanup(func() {
		p.Stop(time.Minute)
		ours, upstream := races(p.Out.String())
		if len(ours) > 0 {
			t.Errorf("%s: the race detector reported %d data race(s) in microlet's code", name, len(ours))
		}
		for _, r := range upstream {
			t.Logf("%s: a data race inside upstream libraries only:%s", name, r)
		}
	})
	return p
}

// races counts the race detector's reports in a child's output: those whose
// conflicting accesses run through microlet's own code, and the others
// (inside upstream libraries only, such as ServiceController's cache in
// k8s.io/cloud-provider v0.36.3, which is not ours to fix).
func races(out string) (ours, upstream []string) {
	blocks := strings.Split(out, "WARNING: DATA RACE")
	for _, b := range blocks[1:] {
		// The accesses come first; "Goroutine N ... created at" stacks
		// follow and name whoever started the goroutine, often us.
		access, _, _ := strings.Cut(b, "\nGoroutine ")
		if strings.Contains(access, "github.com/microlet/microlet/") {
			ours = append(ours, access)
		} else {
			upstream = append(upstream, access)
		}
	}
	return ours, upstream
}

// cloudsyncd starts the binary in controller mode in its own run dir and
// waits for SERVING, which it reaches whether it leads or stands by.
func cloudsyncd(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	dir := testenv.ShortDir(t, "cse")
	all := append([]string{"--run-dir", dir, "--data-dir", dir, "--node-name", name}, args...)
	p := run(t, name, bin(t, cloudsyncdPkg), all...)
	p.sock = filepath.Join(dir, "cloudsyncd.sock")
	cc, err := grpcclient.Dial("unix://" + p.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := grpcclient.WaitServing(ctx, cc, ""); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, p.Out.String())
	}
	return p
}

// controllerArgs is what every test's cloudsyncd shares: the RBAC identity,
// a Lease of its own, and election timings short enough for a test yet long
// enough for a loaded API server to answer renewals in time.
func controllerArgs(kubeconfig, lease, controllers string) []string {
	return []string{
		"--cloud-kubeconfig", kubeconfig,
		"--controllers", controllers,
		"--leader-elect-resource-name", lease,
		"--leader-elect-lease-duration", "10s",
		"--leader-elect-renew-deadline", "8s",
		"--leader-elect-retry-period", "1s",
		"--node-monitor-period", "1s",
		"--node-status-update-frequency", "2s",
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func getNode(t *testing.T, cs kubernetes.Interface, name string) (*corev1.Node, error) {
	t.Helper()
	return cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// setReady sets the Node's Ready condition, as its kubelet would.
func setReady(t *testing.T, cs kubernetes.Interface, name string, ready bool) {
	t.Helper()
	eventually(t, "set Ready", func() error {
		n, err := getNode(t, cs, name)
		if err != nil {
			return err
		}
		n.Status.Conditions = []corev1.NodeCondition{readyCondition(ready)}
		_, err = cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
}

func readyCondition(ready bool) corev1.NodeCondition {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.NodeCondition{Type: corev1.NodeReady, Status: st, Reason: "Test", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
}

// createNode registers a Node as a kubelet with an external cloud provider
// does: carrying the uninitialized taint; ready says whether its Ready
// condition is True (the lifecycle controller only looks at not-ready Nodes).
func createNode(t *testing.T, cs kubernetes.Interface, name string, taint, ready bool) {
	t.Helper()
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}
	if taint {
		n.Spec.Taints = []corev1.Taint{{Key: uninitialized, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	n, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	n.Status.Conditions = []corev1.NodeCondition{readyCondition(ready)}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
