package controlplane

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv"
)

// These tests prove the control plane GetFull returns is a cluster: the
// real kube-scheduler and kube-controller-manager act on what a test
// creates. Every wait is for an object a controller writes; the test
// never writes it itself.

// eventually polls cond every 200 ms until it holds or ctx ends, and
// fails with what cond last said.
func eventually(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var ok bool
		ok, last = cond(ctx)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %s)", what, err, last)
	}
}

// readyFakeNode registers a Node the way a kubelet would (Ready, with
// capacity), with no agent behind it: enough for the scheduler, and for
// the node lifecycle controller to lift the not-ready taint the
// TaintNodesByCondition admission plugin puts on every new Node.
func readyFakeNode(ctx context.Context, t *testing.T, admin kubernetes.Interface) string {
	t.Helper()
	name := unique("fake-node")
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	now := metav1.Now()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Capacity: resources, Allocatable: resources,
			Conditions: []corev1.NodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "FakeReady",
				LastHeartbeatTime: now, LastTransitionTime: now,
			}},
		},
	}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// namespaceFromControllers creates a bare namespace (no EnsureNamespace)
// and deletes it, with its pods at once, when the test ends.
func namespaceFromControllers(ctx context.Context, t *testing.T, admin kubernetes.Interface, prefix string) string {
	t.Helper()
	ns := unique(prefix)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		// No kubelet confirms deletions on a fake node: force them.
		_ = admin.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		_ = admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	return ns
}

// TestDeploymentScheduled: a Deployment gets a ReplicaSet from the
// deployment controller, a Pod from the replicaset controller, and the
// scheduler binds it to a Ready node; the namespace's default
// ServiceAccount, which admits the pod, comes from the controllers too.
func TestDeploymentScheduled(t *testing.T) {
	cp := GetFull(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	node := readyFakeNode(ctx, t, admin)
	ns := namespaceFromControllers(ctx, t, admin, "deploy")

	labels := map[string]string{"app": "web"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					// Only this test's node: others in the package may be Ready too.
					NodeSelector: map[string]string{corev1.LabelHostname: node},
					Containers: []corev1.Container{{
						Name: "web", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
					}},
				},
			},
		},
	}
	dep, err := admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var rsName string
	eventually(ctx, t, "ReplicaSet of the Deployment", func(ctx context.Context) (bool, string) {
		rss, err := admin.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, rs := range rss.Items {
			if ref := metav1.GetControllerOf(&rs); ref != nil && ref.UID == dep.UID {
				rsName = rs.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d ReplicaSets, none owned by the Deployment", len(rss.Items))
	})

	eventually(ctx, t, "pod of "+rsName+" scheduled to "+node, func(ctx context.Context) (bool, string) {
		pods, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) != 1 {
			return false, fmt.Sprintf("%d pods", len(pods.Items))
		}
		p := pods.Items[0]
		if ref := metav1.GetControllerOf(&p); ref == nil || ref.Name != rsName {
			return false, fmt.Sprintf("pod %s owned by %v", p.Name, ref)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && p.Spec.NodeName == node {
				return true, ""
			}
		}
		return false, fmt.Sprintf("pod %s on %q, conditions %+v", p.Name, p.Spec.NodeName, p.Status.Conditions)
	})

	// The node lifecycle controller lifted the admission plugin's
	// not-ready taint, or the scheduler would not have placed the pod.
	got, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, taint := range got.Spec.Taints {
		if taint.Key == corev1.TaintNodeNotReady {
			t.Errorf("node %s still has %v", node, taint)
		}
	}
}

// TestNamespaceControllers: a bare namespace gets its default
// ServiceAccount and kube-root-ca.crt (the CA) from
// kube-controller-manager, each controller under its own service-account
// credential, and a deleted namespace goes away once the namespace
// controller emptied it.
func TestNamespaceControllers(t *testing.T) {
	cp := GetFull(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	ns := unique("bare")
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	eventually(ctx, t, "ServiceAccount "+ns+"/default", func(ctx context.Context) (bool, string) {
		_, err := admin.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	var cm *corev1.ConfigMap
	eventually(ctx, t, "ConfigMap "+ns+"/"+RootCAConfigMap, func(ctx context.Context) (bool, string) {
		var err error
		cm, err = admin.CoreV1().ConfigMaps(ns).Get(ctx, RootCAConfigMap, metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	if cm.Data["ca.crt"] != string(cp.PKI().CACertPEM) {
		t.Errorf("%s holds %q, want the control plane's CA", RootCAConfigMap, cm.Data["ca.crt"])
	}
	// The test created neither; the ConfigMap's field manager (the
	// writer's user agent) names the controller manager. (The
	// ServiceAccount has no fields to manage beyond its name.)
	if len(cm.ManagedFields) == 0 || !strings.HasPrefix(cm.ManagedFields[0].Manager, KubeControllerManager) {
		t.Errorf("%s written by %+v, want %s", RootCAConfigMap, cm.ManagedFields, KubeControllerManager)
	}

	if err := admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "namespace "+ns+" deleted", func(ctx context.Context) (bool, string) {
		got, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		if err != nil {
			return false, err.Error()
		}
		return false, fmt.Sprintf("phase %s, conditions %+v", got.Status.Phase, got.Status.Conditions)
	})
}

// csrFor returns a PEM certificate request for cn in orgs with a new key.
func csrFor(t *testing.T, cn string, orgs ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: orgs}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// waitSigned waits for the controller manager's signer to issue the CSR's
// certificate and checks it chains to the control plane's CA with the
// requested subject.
func waitSigned(ctx context.Context, t *testing.T, cp *ControlPlane, admin kubernetes.Interface, name, cn string) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var csr *certificatesv1.CertificateSigningRequest
	eventually(ctx, t, "CSR "+name+" signed", func(ctx context.Context) (bool, string) {
		var err error
		csr, err = admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(csr.Status.Certificate) > 0, fmt.Sprintf("conditions %+v", csr.Status.Conditions)
	})
	block, _ := pem.Decode(csr.Status.Certificate)
	if block == nil {
		t.Fatalf("CSR %s: certificate is not PEM: %q", name, csr.Status.Certificate)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.PKI().CACertPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("CSR %s: certificate does not chain to the CA as a client certificate: %v", name, err)
	}
	if cert.Subject.CommonName != cn {
		t.Errorf("CSR %s: certificate for %q, want %q", name, cert.Subject.CommonName, cn)
	}
	return csr
}

// TestNodeClientCSRApprovedAndSigned: a node asking for its own client
// certificate (what certificate rotation does) is approved by the
// controller manager's approver, thanks to Bootstrap's
// NodeCertRotationBinding, and signed by its signer with the CA.
func TestNodeClientCSRApprovedAndSigned(t *testing.T) {
	cp := GetFull(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	node := unique("csr-node")
	asNode := newClient(t, cp, node)
	cn := "system:node:" + node
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: unique("node-csr")},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    csrFor(t, cn, NodesGroup),
			SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	if _, err := asNode.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("node creates its CSR: %v", err)
	}
	t.Cleanup(func() {
		_ = admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
	})
	got := waitSigned(ctx, t, cp, admin, csr.Name, cn)
	approved := false
	for _, c := range got.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			approved = true
			if c.Reason != "AutoApproved" {
				t.Errorf("approved with reason %q, want the controller's AutoApproved", c.Reason)
			}
		}
	}
	if !approved {
		t.Errorf("signed without an Approved condition: %+v", got.Status.Conditions)
	}
}

// TestClientCSRSignedOnceApproved: a kube-apiserver-client CSR, which no
// controller approves, is signed by the controller manager once a person
// (the admin) approves it.
func TestClientCSRSignedOnceApproved(t *testing.T) {
	cp := GetFull(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	cn := unique("someone")
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: unique("client-csr")},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    csrFor(t, cn, "developers"),
			SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	created, err := admin.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
	})
	created.Status.Conditions = append(created.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "TestApproved", Message: "approved by the test",
	})
	if _, err := admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, csr.Name, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitSigned(ctx, t, cp, admin, csr.Name, cn)
	if !bytes.Contains(got.Status.Certificate, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("certificate: %q", got.Status.Certificate)
	}
}

// TestComponentsRestart: the scheduler and the controller manager stop
// and start again on their own, and GetFull brings back one a test
// stopped.
func TestComponentsRestart(t *testing.T) {
	cp := GetFull(t)
	schedPID, kcmPID := cp.SchedulerPID(), cp.ControllerManagerPID()
	if schedPID == 0 || kcmPID == 0 {
		t.Fatalf("PIDs: scheduler %d, controller manager %d", schedPID, kcmPID)
	}
	if err := cp.StopScheduler(); err != nil {
		t.Fatal(err)
	}
	if cp.SchedulerPID() != 0 || alive(schedPID, cp.Dir()) {
		t.Fatalf("scheduler (pid %d) still running after StopScheduler", schedPID)
	}
	if cp2 := GetFull(t); cp2 != cp {
		t.Fatal("GetFull returned another control plane")
	}
	if pid := cp.SchedulerPID(); pid == 0 || pid == schedPID {
		t.Fatalf("GetFull did not restart the scheduler: pid %d (was %d)", pid, schedPID)
	}
	if cp.ControllerManagerPID() != kcmPID {
		t.Fatalf("GetFull restarted the running controller manager: pid %d (was %d)", cp.ControllerManagerPID(), kcmPID)
	}
}

// TestStartWithComponents: Options.Scheduler and ControllerManager start
// both with Start, under their own identities, logging into the control
// plane's logs directory; Stop takes all four processes down.
func TestStartWithComponents(t *testing.T) {
	if _, err := FindKubeAPIServer(); err != nil {
		Get(t) // skips or fails the way every test does
	}
	ctx := testContext(t)
	cp, err := Start(ctx, Options{Scheduler: true, ControllerManager: true})
	if err != nil {
		if errors.Is(err, ErrMissingBinary) {
			testenv.RequireOrSkip(t, "%v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	dir := cp.Dir()
	pids := map[string]int{"etcd": cp.EtcdPID(), "kube-apiserver": cp.APIServerPID(), KubeScheduler: cp.SchedulerPID(), KubeControllerManager: cp.ControllerManagerPID()}
	for name, pid := range pids {
		if pid == 0 || !alive(pid, dir) {
			t.Fatalf("%s: pid %d not running", name, pid)
		}
	}
	for _, tc := range []struct{ component, user string }{{KubeScheduler, SchedulerUser}, {KubeControllerManager, ControllerManagerUser}} {
		if st, err := os.Stat(filepath.Join(dir, "logs", tc.component+".log")); err != nil || st.Size() == 0 {
			t.Errorf("%s log: %v (empty: %v)", tc.component, err, err == nil && st.Size() == 0)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig", ComponentKubeconfigFile(tc.component)))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s kubeconfig: %v", tc.component, err)
		}
		if got := review.Status.UserInfo.Username; got != tc.user {
			t.Errorf("%s kubeconfig authenticates as %q, want %q", tc.component, got, tc.user)
		}
	}
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if alive(pid, dir) {
			t.Errorf("%s (pid %d) survives Stop", name, pid)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) && os.Getenv(EnvKeep) != "1" {
		t.Errorf("%s not removed by Stop: %v", dir, err)
	}
}
