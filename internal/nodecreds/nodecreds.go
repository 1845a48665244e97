package nodecreds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base32"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/version"

	"github.com/microlet/microlet/internal/statefile"
)

// ClientPairPrefix names the client certificate files in the certificate
// directory: kubelet-client-<time>.pem and the kubelet-client-current.pem
// symlink, as the kubelet names them.
const ClientPairPrefix = "kubelet-client"

// pendingKeyFile keeps the private key of a request that has not been
// answered yet, so a restart asks again with the same key (and finds the
// same CSR, whose name is derived from it).
const pendingKeyFile = ClientPairPrefix + ".key.tmp"

// NodesGroup is the group of every node's client certificate.
const NodesGroup = "system:nodes"

// Config says where a node's credentials live.
type Config struct {
	// NodeName is the node; its certificate is for system:node:<NodeName>.
	NodeName string
	// Kubeconfig is the node's kubeconfig, written here.
	Kubeconfig string
	// BootstrapKubeconfig is the credential used to ask for the first
	// certificate (and for a new one when the node's has expired).
	BootstrapKubeconfig string
	// CertDir holds the certificate pairs (0700).
	CertDir string
	// WaitTimeout bounds the wait for the first certificate. Default 15
	// minutes.
	WaitTimeout time.Duration
	// Log receives progress and the certificate manager's messages.
	Log *slog.Logger

	clock clock.WithTicker // tests move the node's clock
}

func (c *Config) complete() error {
	switch {
	case c.NodeName == "":
		return errors.New("node credentials: node_name must not be empty")
	case c.Kubeconfig == "":
		return errors.New("node credentials: kubeconfig must name the file to write")
	case c.CertDir == "":
		return errors.New("node credentials: cert_dir must not be empty")
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = 15 * time.Minute
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	return nil
}

// CurrentPairFile is the symlink to the pair in use:
// <CertDir>/kubelet-client-current.pem.
func (c *Config) CurrentPairFile() string {
	return filepath.Join(c.CertDir, ClientPairPrefix+"-current.pem")
}

// UserName is the node's user, system:node:<NodeName>.
func (c *Config) UserName() string { return "system:node:" + c.NodeName }

// withKlog puts log into ctx for the client-go code that logs through klog.
func withKlog(ctx context.Context, log *slog.Logger) context.Context {
	return klog.NewContext(ctx, logr.FromSlogHandler(log.Handler()))
}

// Ensure makes sure Kubeconfig holds a usable credential: it is left alone
// when its client certificate is valid now (or when it authenticates in
// some other way); otherwise a new certificate is requested with
// BootstrapKubeconfig and the kubeconfig is written. The errors are one
// line each and name what to check.
func Ensure(ctx context.Context, cfg Config) error {
	if err := cfg.complete(); err != nil {
		return err
	}
	if _, err := statefile.Sweep(filepath.Dir(cfg.Kubeconfig)); err != nil {
		cfg.Log.Warn("could not remove temporary files a crash left", "err", err)
	}
	ok, why, corrupt := kubeconfigUsable(cfg.Kubeconfig, cfg.clock.Now())
	if ok {
		cfg.Log.Info("node kubeconfig is usable", "kubeconfig", cfg.Kubeconfig)
		return nil
	}
	if cfg.BootstrapKubeconfig == "" {
		return fmt.Errorf("kubeconfig %s: %s, and no bootstrap_kubeconfig to get a new certificate with", cfg.Kubeconfig, why)
	}
	cfg.Log.Info("requesting a client certificate with the bootstrap kubeconfig", "reason", why,
		"bootstrap_kubeconfig", cfg.BootstrapKubeconfig, "user", cfg.UserName())
	boot, err := loadBootstrap(cfg.BootstrapKubeconfig)
	if err != nil {
		return err
	}
	// A kubeconfig that does not decode (torn by a power loss, garbled) is
	// kept aside for a look rather than overwritten, now that a new one
	// can be written in its place.
	if corrupt != nil {
		if _, err := statefile.Quarantine(cfg.Log, cfg.Kubeconfig, corrupt); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
		return fmt.Errorf("cert_dir: %w", err)
	}
	store, err := certificate.NewFileStore(ClientPairPrefix, cfg.CertDir, cfg.CertDir, "", "")
	if err != nil {
		return fmt.Errorf("cert_dir %s: %w", cfg.CertDir, err)
	}
	// A pair left by an earlier run (the kubeconfig write failed after it,
	// or the kubeconfig was removed) is reused while it is valid.
	if cur, err := store.Current(); err == nil && cur.Leaf != nil && validAt(cur.Leaf, cfg.clock.Now()) == "" {
		cfg.Log.Info("reusing the stored client certificate", "file", cfg.CurrentPairFile(), "not_after", cur.Leaf.NotAfter)
		return writeKubeconfig(cfg, boot.raw)
	}
	certPEM, keyPEM, err := requestClientCert(ctx, cfg, boot)
	if err != nil {
		return err
	}
	leaf, err := parseCert(certPEM)
	if err != nil {
		return fmt.Errorf("certificate from the signer: %w", err)
	}
	if now := cfg.clock.Now(); now.Before(leaf.NotBefore) {
		return fmt.Errorf("the new client certificate is valid from %s but this node's clock says %s: the clocks of node and control plane differ by %s; fix the node's time (NTP) and start again",
			leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), leaf.NotBefore.Sub(now).Round(time.Second))
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		return fmt.Errorf("store client certificate in %s: %w", cfg.CertDir, err)
	}
	_ = os.Remove(filepath.Join(cfg.CertDir, pendingKeyFile))
	cfg.Log.Info("client certificate issued", "user", leaf.Subject.CommonName, "not_after", leaf.NotAfter, "file", cfg.CurrentPairFile())
	return writeKubeconfig(cfg, boot.raw)
}

// bootstrap is the bootstrap kubeconfig, loaded.
type bootstrap struct {
	raw  *clientcmdapi.Config
	rest *rest.Config
}

func loadBootstrap(path string) (*bootstrap, error) {
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("bootstrap kubeconfig %s: %w", path, err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("bootstrap kubeconfig %s: %w", path, err)
	}
	rc.UserAgent = version.UserAgent("microlet-bootstrap")
	return &bootstrap{raw: raw, rest: rc}, nil
}

// requestClientCert creates the CSR (again, after a restart: same key, same
// name) and waits for its certificate.
func requestClientCert(ctx context.Context, cfg Config, boot *bootstrap) (certPEM, keyPEM []byte, err error) {
	ctx = withKlog(ctx, cfg.Log.With("csr_for", cfg.UserName()))
	keyPEM, _, err = keyutil.LoadOrGenerateKeyFile(filepath.Join(cfg.CertDir, pendingKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("private key in %s: %w", cfg.CertDir, err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("private key in %s: %w", cfg.CertDir, err)
	}
	subject := &pkix.Name{CommonName: cfg.UserName(), Organization: []string{NodesGroup}}
	csrPEM, err := certutil.MakeCSR(key, subject, nil, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate request: %w", err)
	}
	usages := certificate.DefaultKubeletClientGetUsages(key)
	name := csrName(keyPEM, subject, usages)
	cs, err := kubernetes.NewForConfig(boot.rest)
	if err != nil {
		return nil, nil, fmt.Errorf("bootstrap kubeconfig %s: %w", cfg.BootstrapKubeconfig, err)
	}

	deadline := time.Now().Add(cfg.WaitTimeout)
	wctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// Creating the request: an API server that does not answer yet is
	// retried with backoff until the deadline; a refusal is final.
	var (
		reqName string
		reqUID  types.UID
		lastErr error
	)
	// (A DelayFunc, not ExponentialBackoffWithContext: that one stops
	// retrying once the delay reaches its cap.)
	delay := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 30 * time.Second}.DelayFunc()
	for {
		n, uid, err := csr.RequestCertificateWithContext(wctx, cs, csrPEM, name, certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
		if err == nil {
			reqName, reqUID = n, uid
			break
		}
		if final := refusal(err); final != nil {
			return nil, nil, fmt.Errorf("certificate signing request for %s refused by %s: %w (is the bootstrap token valid, is --enable-bootstrap-token-auth on, and is group system:bootstrappers bound to ClusterRole system:node-bootstrapper?)", cfg.UserName(), boot.rest.Host, final)
		}
		if why := untrustedServer(err); why != "" {
			return nil, nil, fmt.Errorf("untrusted API server: %s does not verify against the certificate-authority of bootstrap kubeconfig %s: %s (is that the cluster's CA?)", boot.rest.Host, cfg.BootstrapKubeconfig, why)
		}
		lastErr = err
		cfg.Log.Warn("cannot create the certificate signing request yet; retrying", "server", boot.rest.Host, "err", err)
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, fmt.Errorf("could not create a certificate signing request at %s within %s (last error: %v): check the bootstrap kubeconfig's server and that the API server is up", boot.rest.Host, cfg.WaitTimeout, lastErr)
		case <-time.After(delay()):
		}
	}
	cfg.Log.Info("certificate signing request created; waiting for approval and signature", "csr", reqName, "timeout", cfg.WaitTimeout)
	certPEM, err = csr.WaitForCertificate(wctx, cs, reqName, reqUID)
	switch {
	case err == nil:
		return certPEM, keyPEM, nil
	case strings.Contains(err.Error(), "is denied") || strings.Contains(err.Error(), "request failed"):
		// A denied request stays denied: the next start asks again with a new key.
		_ = os.Remove(filepath.Join(cfg.CertDir, pendingKeyFile))
		return nil, nil, fmt.Errorf("certificate signing request %s for %s: %s", reqName, cfg.UserName(), strings.TrimPrefix(err.Error(), "certificate signing request "))
	case wctx.Err() != nil && ctx.Err() == nil:
		return nil, nil, fmt.Errorf("certificate signing request %s for %s got no certificate within %s: check that kube-controller-manager runs with --cluster-signing-cert-file/--cluster-signing-key-file and its csrapproving controller, and that group system:bootstrappers is bound to ClusterRole %s (or approve it by hand: kubectl certificate approve %s)",
			reqName, cfg.UserName(), cfg.WaitTimeout, "system:certificates.k8s.io:certificatesigningrequests:nodeclient", reqName)
	case ctx.Err() != nil:
		return nil, nil, ctx.Err()
	default:
		return nil, nil, fmt.Errorf("certificate signing request %s: %w", reqName, err)
	}
}

// untrustedServer describes err when the API server's certificate failed
// verification against the bootstrap kubeconfig's CA (a wrong CA, or a
// server name the certificate does not hold): retrying cannot help.
// client-go's CSR helper formats the transport's error with %v, so the
// x509 types are gone by here; crypto/tls's message is what is left.
func untrustedServer(err error) string {
	var verify *tls.CertificateVerificationError
	if errors.As(err, &verify) {
		return verify.Error()
	}
	msg := err.Error()
	if i := strings.Index(msg, "tls: failed to verify certificate: "); i >= 0 {
		return msg[i:]
	}
	return ""
}

// refusal is err when the API server answered and said no (forbidden,
// unauthorized, invalid): retrying cannot help.
func refusal(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		return err
	}
	return nil
}

// csrName is a stable name for the request: the same key and subject give
// the same name, so a restart finds the request it made before.
func csrName(keyPEM []byte, subject *pkix.Name, usages []certificatesv1.KeyUsage) string {
	h := sha256.New()
	h.Write(keyPEM)
	fmt.Fprintf(h, "\x00%s\x00%s", subject.CommonName, strings.Join(subject.Organization, ","))
	for _, u := range usages {
		fmt.Fprintf(h, "\x00%s", u)
	}
	return "node-csr-" + strings.ToLower(strings.TrimRight(base32.StdEncoding.EncodeToString(h.Sum(nil)), "="))[:40]
}

func parseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// validAt is "" when c is valid at now, else why not.
func validAt(c *x509.Certificate, now time.Time) string {
	switch {
	case now.After(c.NotAfter):
		return "its client certificate expired at " + c.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(c.NotBefore):
		return "its client certificate is not valid before " + c.NotBefore.UTC().Format(time.RFC3339) + " (is this node's clock behind?)"
	}
	return ""
}

// kubeconfigUsable reports whether path is a kubeconfig whose client
// certificate (if it uses one) is valid at now, and if not, why; corrupt
// is set when the file is there and readable but does not decode into a
// kubeconfig a client can be built from.
func kubeconfigUsable(path string, now time.Time) (ok bool, why string, corrupt error) {
	ok, why, corrupt = kubeconfigCheck(path, now)
	if corrupt != nil {
		why = "it is not a usable kubeconfig: " + corrupt.Error()
	}
	return ok, why, corrupt
}

func kubeconfigCheck(path string, now time.Time) (bool, string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, "it does not exist", nil
	}
	if err != nil {
		return false, "it cannot be read: " + err.Error(), nil
	}
	_ = f.Close()
	raw, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return false, "", err // readable, so it does not decode
	}
	rc, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return false, "", err
	}
	certPEM, keyPEM := rc.CertData, rc.KeyData
	if rc.CertFile != "" {
		if certPEM, err = os.ReadFile(rc.CertFile); err != nil {
			return false, "its client certificate cannot be read: " + err.Error(), nil
		}
	}
	if rc.KeyFile != "" {
		if keyPEM, err = os.ReadFile(rc.KeyFile); err != nil {
			return false, "its client key cannot be read: " + err.Error(), nil
		}
	}
	if len(certPEM) == 0 {
		return true, "", nil // a token or another credential: not ours to judge
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return false, "its client certificate and key do not load: " + err.Error(), nil
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return false, "its client certificate does not parse: " + err.Error(), nil
	}
	if why := validAt(leaf, now); why != "" {
		return false, why, nil
	}
	return true, "", nil
}

// writeKubeconfig writes cfg.Kubeconfig atomically (0600): the bootstrap
// kubeconfig's cluster (its CA inlined) and a user whose certificate and key
// are the current pair file, which the services re-read after rotation.
func writeKubeconfig(cfg Config, boot *clientcmdapi.Config) error {
	ctxName := boot.CurrentContext
	kctx := boot.Contexts[ctxName]
	if kctx == nil {
		return fmt.Errorf("bootstrap kubeconfig %s: no current context", cfg.BootstrapKubeconfig)
	}
	cluster := boot.Clusters[kctx.Cluster]
	if cluster == nil {
		return fmt.Errorf("bootstrap kubeconfig %s: context %q names unknown cluster %q", cfg.BootstrapKubeconfig, ctxName, kctx.Cluster)
	}
	c := cluster.DeepCopy()
	if c.CertificateAuthority != "" && len(c.CertificateAuthorityData) == 0 {
		ca := c.CertificateAuthority
		if !filepath.IsAbs(ca) {
			ca = filepath.Join(filepath.Dir(cfg.BootstrapKubeconfig), ca)
		}
		data, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("bootstrap kubeconfig %s: certificate-authority: %w", cfg.BootstrapKubeconfig, err)
		}
		c.CertificateAuthorityData, c.CertificateAuthority = data, ""
	}
	c.LocationOfOrigin = ""
	out := clientcmdapi.NewConfig()
	out.Clusters["default-cluster"] = c
	out.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{
		ClientCertificate: cfg.CurrentPairFile(),
		ClientKey:         cfg.CurrentPairFile(),
	}
	out.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth", Namespace: "default"}
	out.CurrentContext = "default-context"
	data, err := clientcmd.Write(*out)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Kubeconfig), 0o755); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", cfg.Kubeconfig, err)
	}
	if err := statefile.WriteFile(cfg.Kubeconfig, data, 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.Log.Info("wrote node kubeconfig", "kubeconfig", cfg.Kubeconfig, "client_certificate", cfg.CurrentPairFile())
	return nil
}

// Check returns nil when kubeconfig is usable now (its client certificate,
// if it has one, is valid), else why not: a healthcheck for the services
// that wait for it.
func Check(kubeconfig string) error {
	if ok, why, _ := kubeconfigUsable(kubeconfig, time.Now()); !ok {
		return fmt.Errorf("kubeconfig %s: %s", kubeconfig, why)
	}
	return nil
}
