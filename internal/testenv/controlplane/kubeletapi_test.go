package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv"
)

// fakeKubelet is a TLS server standing in for a node's kubelet API. It asks
// for (but does not verify) client certificates and records who called.
type fakeKubelet struct {
	srv *httptest.Server

	mu      sync.Mutex
	callers []*x509.Certificate // nil entries: called without a certificate
	paths   []string
}

// fakeLog is what the fake kubelet answers for every container's log.
const fakeLog = "hello from the node\n"

// startFakeKubelet serves /healthz and /containerLogs/ on host (an IP
// address, port chosen freely) with cert, or with httptest's own
// certificate (signed by a CA nobody trusts, like a kubelet's self-signed
// one) when cert is nil.
func startFakeKubelet(t *testing.T, host string, cert *tls.Certificate) *fakeKubelet {
	t.Helper()
	f := &fakeKubelet{}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c *x509.Certificate
		if len(r.TLS.PeerCertificates) > 0 {
			c = r.TLS.PeerCertificates[0]
		}
		f.mu.Lock()
		f.callers = append(f.callers, c)
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		switch {
		case r.URL.Path == "/healthz":
			_, _ = w.Write([]byte("ok"))
		case strings.HasPrefix(r.URL.Path, "/containerLogs/"):
			_, _ = w.Write([]byte(fakeLog))
		default:
			http.NotFound(w, r)
		}
	}))
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	_ = f.srv.Listener.Close()
	f.srv.Listener = l
	f.srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	if cert != nil {
		f.srv.TLS.Certificates = []tls.Certificate{*cert}
	}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeKubelet) port() int32 {
	return int32(f.srv.Listener.Addr().(*net.TCPAddr).Port)
}

// seen returns the client certificate and path of every request so far.
func (f *fakeKubelet) seen() ([]*x509.Certificate, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.callers), slices.Clone(f.paths)
}

// checkKubeletClient fails unless every request the fake kubelet got came
// with the apiserver's kubelet client certificate: CN
// kube-apiserver-kubelet-client in the group bound to
// system:kubelet-api-admin, signed by the control plane's CA.
func checkKubeletClient(t *testing.T, cp *ControlPlane, f *fakeKubelet, wantPath string) {
	t.Helper()
	certs, paths := f.seen()
	if len(certs) != 1 || paths[0] != wantPath {
		t.Fatalf("the node got requests for %v, want one for %s", paths, wantPath)
	}
	c := certs[0]
	if c == nil {
		t.Fatal("the apiserver presented no client certificate")
	}
	if c.Subject.CommonName != KubeletClientUser || !slices.Equal(c.Subject.Organization, []string{KubeletClientGroup}) {
		t.Fatalf("client certificate subject %v, want CN=%s O=%s", c.Subject, KubeletClientUser, KubeletClientGroup)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.PKI().CACertPEM)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("client certificate does not chain to the control plane's CA: %v", err)
	}
}

// registerKubeletNode creates a Node whose kubelet API is at ip:port. Its
// Hostname address comes first and does not resolve, so reaching the node
// at all proves the apiserver prefers InternalIP.
func registerKubeletNode(ctx context.Context, t *testing.T, admin kubernetes.Interface, name, ip string, port int32) {
	t.Helper()
	// The status goes in with the create, as a kubelet registers: an
	// update after it would race the controllers (node lifecycle, ttl)
	// that change a new Node when the control plane runs them (GetFull).
	node := newNode(name)
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: name + ".invalid"},
		{Type: corev1.NodeInternalIP, Address: ip},
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// fakeKubeletNode starts a fake kubelet on ip (see startFakeKubelet) and
// registers a Node named after prefix for it.
func fakeKubeletNode(ctx context.Context, t *testing.T, admin kubernetes.Interface, prefix, ip string, cert *tls.Certificate) (string, *fakeKubelet) {
	t.Helper()
	kubelet := startFakeKubelet(t, ip, cert)
	node := unique(prefix)
	registerKubeletNode(ctx, t, admin, node, ip, kubelet.port())
	return node, kubelet
}

// podOnNode creates a pod with container "c" bound to node in the default
// namespace and returns its name; `kubectl logs` of it goes to the node.
func podOnNode(ctx context.Context, t *testing.T, admin kubernetes.Interface, node string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: unique("logs-pod"), Namespace: metav1.NamespaceDefault},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	return pod.Name
}

// podLogs is what `kubectl logs <pod> -c c` asks the apiserver for.
func podLogs(ctx context.Context, admin kubernetes.Interface, pod string) (string, error) {
	body, err := admin.CoreV1().Pods(metav1.NamespaceDefault).GetLogs(pod, &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
	return string(body), err
}

// nodeProxyHealthz is what `kubectl get --raw /api/v1/nodes/<n>/proxy/healthz` does.
func nodeProxyHealthz(ctx context.Context, admin kubernetes.Interface, node string) (string, error) {
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "healthz").DoRaw(ctx)
	return string(body), err
}

// TestAPIServerPresentsKubeletClientCert sends pod logs through the
// apiserver to a node at InternalIP 127.0.0.1, as `kubectl logs` does, and
// checks the node saw the kubelet client certificate.
func TestAPIServerPresentsKubeletClientCert(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	node, kubelet := fakeKubeletNode(ctx, t, admin, "logs-node", "127.0.0.1", nil)
	pod := podOnNode(ctx, t, admin, node)

	body, err := podLogs(ctx, admin, pod)
	if err != nil {
		t.Fatalf("GET pods/%s/log: %v (%s)", pod, err, body)
	}
	if body != fakeLog {
		t.Fatalf("log %q, want %q", body, fakeLog)
	}
	checkKubeletClient(t, cp, kubelet, "/containerLogs/default/"+pod+"/c")
}

// TestNodeProxy: the apiserver's nodes/proxy refuses addresses that are
// not global unicast (upstream's check, not a flag), so it cannot reach a
// node at 127.0.0.1 as logs, exec, attach and port-forward can; at the
// host's own address it proxies, with the kubelet client certificate.
func TestNodeProxy(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")

	refused, loopback := fakeKubeletNode(ctx, t, admin, "loopback-node", "127.0.0.1", nil)
	if body, err := nodeProxyHealthz(ctx, admin, refused); !apierrors.IsBadRequest(err) || !strings.Contains(body, "address not allowed") {
		t.Errorf("nodes/proxy to 127.0.0.1: %q, %v; want 400 address not allowed", body, err)
	}
	if certs, _ := loopback.seen(); len(certs) != 0 {
		t.Errorf("nodes/proxy reached the loopback node %d times", len(certs))
	}

	hostIP := testenv.HostIP(t)
	node, kubelet := fakeKubeletNode(ctx, t, admin, "proxied-node", hostIP, nil)
	body, err := nodeProxyHealthz(ctx, admin, node)
	if err != nil || body != "ok" {
		t.Fatalf("GET nodes/%s/proxy/healthz at %s: %q, %v", node, hostIP, body, err)
	}
	checkKubeletClient(t, cp, kubelet, "/healthz")
}

func accessReview(user string, groups []string, verb, subresource, node string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Resource: "nodes", Subresource: subresource, Name: node},
	}}
}

// TestKubeletAPIAuthorization asks the apiserver what a node asks it for
// every request to its API (SubjectAccessReview): the apiserver's kubelet
// client may use every kubelet API of every node, through the group
// binding; a node may not use another node's.
func TestKubeletAPIAuthorization(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	sars := newClient(t, cp, "").AuthorizationV1().SubjectAccessReviews()
	node := unique("authz-node")
	review := func(r *authorizationv1.SubjectAccessReview) (*authorizationv1.SubjectAccessReviewStatus, error) {
		got, err := sars.Create(ctx, r, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		return &got.Status, nil
	}
	group := []string{KubeletClientGroup, "system:authenticated"}
	// exec, attach and port-forward are "create" on nodes/proxy; logs,
	// stats and metrics are "get" on their subresources.
	for _, a := range [][2]string{{"get", "proxy"}, {"create", "proxy"}, {"get", "log"}, {"get", "stats"}, {"get", "metrics"}, {"get", "healthz"}} {
		testenv.Eventually(t, "allowed: "+a[0]+" nodes/"+a[1], time.Minute, func() error {
			st, err := review(accessReview(KubeletClientUser, group, a[0], a[1], node))
			if err != nil {
				return err
			}
			if !st.Allowed {
				return errors.New("denied: " + st.Reason)
			}
			return nil
		})
	}

	denied := []struct {
		what   string
		review *authorizationv1.SubjectAccessReview
	}{
		{"the kubelet client user without its group", accessReview(KubeletClientUser, []string{"system:authenticated"}, "get", "proxy", node)},
		{"a node on another node's proxy", accessReview("system:node:"+unique("other-node"), []string{"system:nodes", "system:authenticated"}, "get", "proxy", node)},
		{"a node exec-ing on another node", accessReview("system:node:"+unique("other-node"), []string{"system:nodes", "system:authenticated"}, "create", "proxy", node)},
	}
	for _, tc := range denied {
		st, err := review(tc.review)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if st.Allowed {
			t.Errorf("%s: allowed (%s), want denied", tc.what, st.Reason)
		}
	}
}

// TestKubectl runs the kubectl hack/build-kubectl.sh built against the
// control plane: its version is the pinned one, it lists namespaces as the
// admin, and it sees the kubelet client's permission as a node would.
func TestKubectl(t *testing.T) {
	cp := Get(t)
	kubectl := Kubectl(t)
	ctx := testContext(t)
	run := func(args ...string) string {
		t.Helper()
		cmd := cp.KubectlCommand(ctx, kubectl, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return string(out)
	}

	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := pinnedVersion(filepath.Join(root, controlPlaneModule), kubernetesModule)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(run("version", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	if v.ClientVersion.GitVersion != pinned || v.ServerVersion.GitVersion != pinned {
		t.Errorf("kubectl version: client %q, server %q, want %s for both", v.ClientVersion.GitVersion, v.ServerVersion.GitVersion, pinned)
	}

	if out := run("get", "namespaces", "-o", "name"); !slices.Contains(strings.Fields(out), "namespace/default") {
		t.Errorf("kubectl get namespaces:\n%s", out)
	}
	if out := strings.TrimSpace(run("auth", "can-i", "create", "nodes", "--subresource=proxy", "--as", KubeletClientUser, "--as-group", KubeletClientGroup)); out != "yes" {
		t.Errorf("kubectl auth can-i create nodes/proxy as the kubelet client: %q", out)
	}
	// kubectl logs, through the apiserver, to a node at 127.0.0.1.
	admin := newClient(t, cp, "")
	node, kubelet := fakeKubeletNode(ctx, t, admin, "kubectl-node", "127.0.0.1", nil)
	pod := podOnNode(ctx, t, admin, node)
	if out := run("logs", pod, "-c", "c"); out != fakeLog {
		t.Errorf("kubectl logs: %q, want %q", out, fakeLog)
	}
	checkKubeletClient(t, cp, kubelet, "/containerLogs/default/"+pod+"/c")
	// The discovery cache stays in the control plane's directory.
	if _, err := os.Stat(filepath.Join(cp.Dir(), "kubectl-cache")); err != nil {
		t.Errorf("no kubectl cache in the control plane's dir: %v", err)
	}
}

// TestVerifiedKubeletServingCerts starts a second control plane with
// VerifyKubeletServingCerts: it reaches a node serving a certificate from
// PKI.KubeletServingCert and refuses one serving a self-signed
// certificate, which the default control plane accepts.
func TestVerifiedKubeletServingCerts(t *testing.T) {
	Get(t) // skips or fails like every test here when binaries are missing
	ctx := testContext(t)
	cp, err := Start(ctx, Options{VerifyKubeletServingCerts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	admin := newClient(t, cp, "")

	// The apiserver dials 127.0.0.1 and checks that name only.
	certPEM, keyPEM, err := cp.PKI().KubeletServingCert("trusted-node", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	trusted, good := fakeKubeletNode(ctx, t, admin, "trusted-node", "127.0.0.1", &cert)
	pod := podOnNode(ctx, t, admin, trusted)
	if body, err := podLogs(ctx, admin, pod); err != nil || body != fakeLog {
		t.Fatalf("node with a CA-signed serving certificate: %q, %v", body, err)
	}
	checkKubeletClient(t, cp, good, "/containerLogs/default/"+pod+"/c")

	selfSigned, bad := fakeKubeletNode(ctx, t, admin, "self-signed-node", "127.0.0.1", nil)
	pod = podOnNode(ctx, t, admin, selfSigned)
	body, err := podLogs(ctx, admin, pod)
	if err == nil {
		t.Fatalf("node with a self-signed serving certificate was trusted: %q", body)
	}
	if certs, _ := bad.seen(); len(certs) != 0 {
		t.Fatalf("the untrusted node served %d requests", len(certs))
	}
	t.Logf("refused as expected: %v", err)
}

// TestEnsureKubeletAPIAccess: a second call changes nothing, and a binding
// whose subjects were changed gets them back.
func TestEnsureKubeletAPIAccess(t *testing.T) {
	cp := Get(t)
	ctx := testContext(t)
	admin := newClient(t, cp, "")
	crbs := admin.RbacV1().ClusterRoleBindings()
	before, err := crbs.Get(ctx, KubeletAPIAdminBinding, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("bootstrap made no binding: %v", err)
	}
	if err := EnsureKubeletAPIAccess(ctx, admin); err != nil {
		t.Fatal(err)
	}
	again, err := crbs.Get(ctx, KubeletAPIAdminBinding, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != before.ResourceVersion {
		t.Errorf("a second call rewrote the binding (resourceVersion %s -> %s)", before.ResourceVersion, again.ResourceVersion)
	}

	again.Subjects[0].Name = "someone-else"
	if _, err := crbs.Update(ctx, again, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureKubeletAPIAccess(ctx, admin); err != nil {
		t.Fatal(err)
	}
	fixed, err := crbs.Get(ctx, KubeletAPIAdminBinding, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(fixed.Subjects) != 1 || fixed.Subjects[0].Name != KubeletClientGroup || fixed.RoleRef.Name != KubeletAPIAdminRole {
		t.Fatalf("binding not repaired: %+v %+v", fixed.Subjects, fixed.RoleRef)
	}
}

// TestKubeletCertificates checks the certificates without a control plane:
// the kubelet client credential is written once and kept, and a kubelet
// serving certificate is valid for the node's names and addresses.
func TestKubeletCertificates(t *testing.T) {
	dir := t.TempDir()
	pki, err := NewPKI(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(filepath.Join(dir, KubeletClientCertFile))
	if err != nil {
		t.Fatalf("NewPKI wrote no kubelet client certificate: %v", err)
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, KubeletClientCertFile), filepath.Join(dir, KubeletClientKeyFile)); err != nil {
		t.Fatal(err)
	}
	reloaded, err := LoadPKI(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := reloaded.EnsureKubeletClientCert(); err != nil {
		t.Fatal(err)
	}
	if second, _ := os.ReadFile(filepath.Join(dir, KubeletClientCertFile)); string(second) != string(first) {
		t.Error("EnsureKubeletClientCert replaced an existing credential")
	}
	if err := os.Remove(filepath.Join(dir, KubeletClientKeyFile)); err != nil {
		t.Fatal(err)
	}
	if err := reloaded.EnsureKubeletClientCert(); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, KubeletClientCertFile), filepath.Join(dir, KubeletClientKeyFile)); err != nil {
		t.Fatalf("a half-missing credential was not rewritten as a pair: %v", err)
	}

	certPEM, keyPEM, err := pki.KubeletServingCert("node-x", "127.0.0.1", "node-x.example")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pki.CACertPEM)
	for _, host := range []string{"127.0.0.1", "node-x", "node-x.example"} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate not valid for %s: %v", host, err)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.2"}); err == nil {
		t.Error("serving certificate valid for an address it was not signed for")
	}
	if c.Subject.CommonName != "system:node:node-x" {
		t.Errorf("subject %v", c.Subject)
	}
	if _, _, err := pki.KubeletServingCert(""); err == nil {
		t.Error("empty node name accepted")
	}
}
