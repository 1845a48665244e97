package nodecreds

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// signingDuration is the controller manager's certificate lifetime in this
// package's control plane. Its signer backdates short certificates by 5
// minutes, so the manager sees 8 minutes and renews 0.6–2.2 minutes after
// issue; the services then have at least 48 s to switch before the old
// certificate expires.
const signingDuration = 3 * time.Minute

// cluster is this package's control plane: bootstrap tokens on, the
// controller manager signing short certificates.
var cluster struct {
	once sync.Once
	cp   *controlplane.ControlPlane
	err  error
}

func TestMain(m *testing.M) {
	code := controlplane.Main(m)
	if cluster.cp != nil {
		_ = cluster.cp.Stop()
	}
	os.Exit(code)
}

func controlPlane(t *testing.T) *controlplane.ControlPlane {
	t.Helper()
	cluster.once.Do(func() {
		cluster.cp, cluster.err = controlplane.Start(context.Background(), controlplane.Options{
			BootstrapTokenAuth:     true,
			ControllerManager:      true,
			ClusterSigningDuration: signingDuration,
		})
	})
	if cluster.err != nil {
		if errors.Is(cluster.err, controlplane.ErrMissingBinary) {
			testenv.RequireOrSkip(t, "no control plane: %v", cluster.err)
		}
		t.Fatal(cluster.err)
	}
	return cluster.cp
}

func admin(t *testing.T, cp *controlplane.ControlPlane) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// bootstrapKubeconfig writes a kubeconfig with a fresh bootstrap token.
func bootstrapKubeconfig(t *testing.T, cp *controlplane.ControlPlane, dir string) string {
	t.Helper()
	tok, err := cp.CreateBootstrapToken(context.Background(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "bootstrap.kubeconfig")
	if err := cp.WriteBootstrapKubeconfig(p, tok); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUnreadableBootstrapKubeconfig: one line naming the file.
func TestUnreadableBootstrapKubeconfig(t *testing.T) {
	dir := t.TempDir()
	boot := filepath.Join(dir, "missing.kubeconfig")
	err := Ensure(context.Background(), Config{NodeName: "n1", Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: boot, CertDir: filepath.Join(dir, "pki")})
	if err == nil || !strings.Contains(err.Error(), "bootstrap kubeconfig "+boot) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("err = %v, want one line naming %s", err, boot)
	}
	if err := os.WriteFile(boot, []byte("clusters: [this is not a kubeconfig"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = Ensure(context.Background(), Config{NodeName: "n1", Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: boot, CertDir: filepath.Join(dir, "pki")})
	if err == nil || !strings.Contains(err.Error(), "bootstrap kubeconfig "+boot) {
		t.Fatalf("err = %v, want it to name %s", err, boot)
	}
}

// TestJoinWritesKubeconfig: a bootstrap token gets the node a certificate
// for system:node:<name> in system:nodes, stored 0600 behind the
// -current.pem symlink, and a kubeconfig that works; a second Ensure
// leaves the valid credential alone.
func TestJoinWritesKubeconfig(t *testing.T) {
	cp := controlPlane(t)
	dir := t.TempDir()
	name := "join-" + rand.String(5)
	cfg := Config{NodeName: name, Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: bootstrapKubeconfig(t, cp, dir), CertDir: filepath.Join(dir, "pki"), WaitTimeout: 2 * time.Minute}
	if err := Ensure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	target, err := os.Readlink(cfg.CurrentPairFile())
	if err != nil {
		t.Fatalf("current pair is not a symlink: %v", err)
	}
	st, err := os.Stat(cfg.CurrentPairFile())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("pair %s: %v %v", target, st, err)
	}
	if !Owned(cfg) {
		t.Error("Owned = false for the kubeconfig Ensure wrote")
	}
	rc, err := kubeconfigClient(cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	// The node may read its own Node (absent yet) — a 404, not a 401/403.
	_, err = rc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("get own node with the new credential: %v, want not found", err)
	}
	if err := Ensure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	again, _ := os.Readlink(cfg.CurrentPairFile())
	if again != target {
		t.Errorf("a second Ensure replaced a valid certificate: %s -> %s", target, again)
	}
}

// TestDeniedCSR: the denial's reason and message reach the error. The
// requester may create CSRs but not have node certificates approved, so
// the controller manager leaves its request alone and the test denies it.
func TestDeniedCSR(t *testing.T) {
	cp := controlPlane(t)
	cs := admin(t, cp)
	dir := t.TempDir()
	name := "denied-" + rand.String(5)
	cfg := Config{NodeName: name, Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: requesterKubeconfig(t, cp, dir), CertDir: filepath.Join(dir, "pki"), WaitTimeout: 2 * time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			list, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range list.Items {
				if c.Spec.Username == requesterUser && requestCN(c.Spec.Request) == "system:node:"+name {
					c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
						Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "NotYourName", Message: "other nodes may not ask for this name",
					})
					_, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, &c, metav1.UpdateOptions{})
					return err == nil, nil
				}
			}
			return false, nil
		})
	}()
	err := Ensure(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), "NotYourName") || !strings.Contains(err.Error(), "other nodes may not ask for this name") {
		t.Fatalf("err = %v, want the denial with its reason and message", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.CertDir, pendingKeyFile)); !os.IsNotExist(err) {
		t.Errorf("the key of a denied request is kept (%v); the next start must use a new one", err)
	}
}

// TestSignerNeverAnswers: nobody approves, so the wait ends at the
// timeout with what to check.
func TestSignerNeverAnswers(t *testing.T) {
	cp := controlPlane(t)
	dir := t.TempDir()
	name := "waiting-" + rand.String(5)
	cfg := Config{NodeName: name, Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: requesterKubeconfig(t, cp, dir), CertDir: filepath.Join(dir, "pki"), WaitTimeout: 5 * time.Second}
	err := Ensure(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "got no certificate within 5s") || !strings.Contains(err.Error(), "kube-controller-manager") || !strings.Contains(err.Error(), "kubectl certificate approve node-csr-") {
		t.Fatalf("err = %v, want a timeout naming what to check", err)
	}
	// The restart after such a timeout finds the same request.
	key, err := os.ReadFile(filepath.Join(cfg.CertDir, pendingKeyFile))
	if err != nil || len(key) == 0 {
		t.Fatalf("pending key not kept for the next try: %v", err)
	}
}

// TestClockSkew: a node whose clock is an hour behind the control plane
// gets a certificate that is not valid yet, and says so.
func TestClockSkew(t *testing.T) {
	cp := controlPlane(t)
	dir := t.TempDir()
	name := "skew-" + rand.String(5)
	cfg := Config{NodeName: name, Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: bootstrapKubeconfig(t, cp, dir), CertDir: filepath.Join(dir, "pki"), WaitTimeout: 2 * time.Minute,
		clock: testingclock.NewFakeClock(time.Now().Add(-time.Hour))}
	err := Ensure(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "clock") || !strings.Contains(err.Error(), "NTP") {
		t.Fatalf("err = %v, want a clock-skew error", err)
	}
	if _, err := os.Stat(cfg.Kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig written despite the unusable certificate: %v", err)
	}
}

// TestExpiredKubeconfigWithoutBootstrap: an expired credential and no way
// to get a new one is one clear line.
func TestExpiredKubeconfigWithoutBootstrap(t *testing.T) {
	cp := controlPlane(t)
	dir := t.TempDir()
	kc := cp.NodeKubeconfig("expired-" + rand.String(5))
	cfg := Config{NodeName: "n", Kubeconfig: kc, CertDir: filepath.Join(dir, "pki"), clock: testingclock.NewFakeClock(time.Now().Add(20 * 365 * 24 * time.Hour))}
	err := Ensure(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "no bootstrap_kubeconfig") {
		t.Fatalf("err = %v", err)
	}
}

func kubeconfigClient(path string) (kubernetes.Interface, error) {
	b, err := loadBootstrap(path) // any kubeconfig loads the same way
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(b.rest)
}

const requesterUser = "system:serviceaccount:default:csr-requester"

// requesterKubeconfig is a credential that may create CSRs
// (system:node-bootstrapper) but whose node client requests the controller
// manager does not approve: neither a bootstrap token nor the node itself.
func requesterKubeconfig(t *testing.T, cp *controlplane.ControlPlane, dir string) string {
	t.Helper()
	ctx := context.Background()
	cs := admin(t, cp)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "csr-requester", Namespace: "default"}}
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test:csr-requester"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: controlplane.NodeBootstrapperRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "csr-requester", Namespace: "default"}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "csr-requester", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "requester.kubeconfig")
	if err := controlplane.WriteKubeconfig(p, cp.Host(), cp.PKI().CACertPEM, requesterUser, nil, nil, tr.Status.Token); err != nil {
		t.Fatal(err)
	}
	return p
}

func requestCN(p []byte) string {
	b, _ := pem.Decode(p)
	if b == nil {
		return ""
	}
	r, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return ""
	}
	return r.Subject.CommonName
}

// TestBadBootstrapToken: a token the API server does not know is refused
// at once (no retries until the timeout), and the error says what to check.
func TestBadBootstrapToken(t *testing.T) {
	cp := controlPlane(t)
	dir := t.TempDir()
	boot := filepath.Join(dir, "bootstrap.kubeconfig")
	if err := cp.WriteBootstrapKubeconfig(boot, "abcdef.0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeName: "badtoken-" + rand.String(5), Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: boot, CertDir: filepath.Join(dir, "pki"), WaitTimeout: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := Ensure(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "Unauthorized") || !strings.Contains(err.Error(), "is the bootstrap token valid") {
		t.Fatalf("err = %v, want an Unauthorized refusal naming the bootstrap token", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Ensure retried a refusal until the test's deadline: %v", err)
	}
}

// TestWrongCA: a bootstrap kubeconfig whose certificate-authority is not
// the one that signed the API server's certificate fails at once, naming
// the kubeconfig and the CA, instead of retrying until the timeout.
func TestWrongCA(t *testing.T) {
	cp := controlPlane(t)
	dir := t.TempDir()
	boot := bootstrapKubeconfig(t, cp, dir)
	kc, err := clientcmd.LoadFromFile(boot)
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := keyutil.ParsePrivateKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "some-other-ca"}, signer.(crypto.Signer))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.CertificateAuthority = ""
		c.CertificateAuthorityData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: other.Raw})
	}
	if err := clientcmd.WriteToFile(*kc, boot); err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeName: "wrongca-" + rand.String(5), Kubeconfig: filepath.Join(dir, "kubeconfig"), BootstrapKubeconfig: boot, CertDir: filepath.Join(dir, "pki"), WaitTimeout: 10 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = Ensure(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "untrusted API server") || !strings.Contains(err.Error(), boot) || !strings.Contains(err.Error(), "certificate-authority") {
		t.Fatalf("err = %v, want the untrusted API server named with the kubeconfig and its CA", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Ensure retried a certificate verification failure until the test's deadline: %v", err)
	}
}
