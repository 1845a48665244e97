package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

func TestMain(m *testing.M) {
	os.Exit(Main(m))
}

func newClient(t testing.TB, cp *ControlPlane, node string) kubernetes.Interface {
	t.Helper()
	cfg := cp.AdminConfig()
	if node != "" {
		cfg = cp.NodeConfig(node)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var uniqueSeq atomic.Int64

// unique names objects per run: the control plane lives as long as the
// test binary, so -count=N would otherwise meet the previous run's objects.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, uniqueSeq.Add(1))
}

func newNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func newLease(node string) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(node),
			LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime:            &metav1.MicroTime{Time: time.Now()},
		},
	}
}

// readyPatch is the strategic merge patch a kubelet would send to set its
// Ready condition, computed with upstream's strategicpatch.
func readyPatch(t *testing.T, node *corev1.Node) []byte {
	t.Helper()
	updated := node.DeepCopy()
	updated.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "MicroletReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
	}}
	oldJSON, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	newJSON, err := json.Marshal(updated)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := strategicpatch.CreateTwoWayMergePatch(oldJSON, newJSON, corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	return patch
}

// TestNodeIdentityManagesItself does with the node credential what a
// kubelet does at startup: register the Node, take its Lease, report status.
func TestNodeIdentityManagesItself(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	name := unique("self-node")
	node := newClient(t, cp, name)

	created, err := node.CoreV1().Nodes().Create(ctx, newNode(name), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("node creates its own Node: %v", err)
	}
	if _, err := node.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, newLease(name), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node creates its own Lease: %v", err)
	}
	if _, err := node.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, readyPatch(t, created), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("node patches its own status: %v", err)
	}

	// Read back with the admin identity, so the check does not depend on
	// what the node may read.
	got, err := newClient(t, cp, "").CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Reason != "MicroletReady" {
		t.Fatalf("status not stored: %+v", got.Status.Conditions)
	}
	lease, err := node.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lease.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := node.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node renews its own Lease: %v", err)
	}
}

// TestNodeRestriction proves the Node authorizer and NodeRestriction are
// really on: the same kind of credential is refused on another node's
// objects. Under AlwaysAllow every case here would succeed.
func TestNodeRestriction(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	victim := unique("victim-node")
	victimNode, err := admin.CoreV1().Nodes().Create(ctx, newNode(victim), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	victimLease, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, newLease(victim), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	intruderName := unique("intruder-node")
	intruder := newClient(t, cp, intruderName)

	cases := []struct {
		name string
		do   func() error
	}{
		{"patch another node's status", func() error {
			_, err := intruder.CoreV1().Nodes().Patch(ctx, victim, types.StrategicMergePatchType, readyPatch(t, victimNode), metav1.PatchOptions{}, "status")
			return err
		}},
		{"update another node's lease", func() error {
			l := victimLease.DeepCopy()
			l.Spec.HolderIdentity = ptr.To(intruderName)
			_, err := intruder.CoordinationV1().Leases(corev1.NamespaceNodeLease).Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
		{"create a lease named after another node", func() error {
			_, err := intruder.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, newLease(unique("third-node")), metav1.CreateOptions{})
			return err
		}},
		{"create another node", func() error {
			_, err := intruder.CoreV1().Nodes().Create(ctx, newNode(unique("third-node")), metav1.CreateOptions{})
			return err
		}},
		{"delete another node", func() error {
			return intruder.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if !apierrors.IsForbidden(err) {
				t.Fatalf("want 403 Forbidden, got %v", err)
			}
		})
	}
}

// TestKubeconfigFiles checks that every kubeconfig we hand out
// authenticates as the identity it claims, including one exported with a
// reloaded PKI as hack/devcontrolplane's export mode does.
func TestKubeconfigFiles(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	pki, err := LoadPKI(filepath.Join(cp.Dir(), "pki"))
	if err != nil {
		t.Fatal(err)
	}
	kcNode := unique("kubeconfig-node")
	exported := filepath.Join(t.TempDir(), "exported.kubeconfig")
	if err := pki.WriteNodeKubeconfig(exported, cp.Host(), "exported-node"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, user string }{
		{cp.AdminKubeconfig(), AdminUser},
		{cp.NodeKubeconfig(kcNode), "system:node:" + kcNode},
		{exported, "system:node:exported-node"},
	} {
		cfg, err := clientcmd.BuildConfigFromFlags("", tc.path)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if got := review.Status.UserInfo.Username; got != tc.user {
			t.Errorf("%s authenticates as %q, want %q", tc.path, got, tc.user)
		}
	}

	// The static admin token, for clients that cannot use certificates.
	cfg := &rest.Config{Host: cp.Host(), BearerToken: cp.AdminToken(), TLSClientConfig: rest.TLSClientConfig{CAData: pki.CACertPEM}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("admin token: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != AdminUser {
		t.Errorf("admin token authenticates as %q", got)
	}
}

func TestEnsureNamespace(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	ns := unique("ensure-ns")
	for i := 0; i < 2; i++ { // the second call proves it is idempotent
		if err := cp.EnsureNamespace(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	admin := newClient(t, cp, "")
	if _, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod is admitted only if its service account exists; this is what
	// other packages' tests rely on.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
		Spec:       corev1.PodSpec{NodeName: "some-node", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod in ensured namespace: %v", err)
	}
}

// TestAPIServerRestart stops and restarts only the apiserver: same port,
// same etcd, so stored objects survive and old clients reconnect.
func TestAPIServerRestart(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	survivor := unique("survivor")
	if _, err := admin.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: survivor}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host, etcdPID := cp.Host(), cp.EtcdPID()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if cp.APIServerPID() != 0 {
		t.Fatal("apiserver still has a PID after StopAPIServer")
	}
	if _, err := admin.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, survivor, metav1.GetOptions{}); err == nil {
		t.Fatal("apiserver answers after StopAPIServer")
	}
	if err := cp.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if cp.Host() != host || cp.EtcdPID() != etcdPID {
		t.Fatalf("restart moved things: host %s -> %s, etcd pid %d -> %d", host, cp.Host(), etcdPID, cp.EtcdPID())
	}
	if _, err := admin.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, survivor, metav1.GetOptions{}); err != nil {
		t.Fatalf("object lost across apiserver restart: %v", err)
	}
}
