package nodecreds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate"

	"github.com/microlet/microlet/internal/version"
)

// Rotator renews the node's client certificate before it expires: client-go's
// certificate manager on the FileStore Ensure wrote.
type Rotator struct {
	cfg Config
	mgr certificate.Manager
}

// NewRotator prepares rotation of the pair Ensure stored. The manager asks
// for a new certificate with the node's own (current) certificate, or with
// the bootstrap kubeconfig when the current one has expired.
func NewRotator(ctx context.Context, cfg Config) (*Rotator, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	store, err := certificate.NewFileStore(ClientPairPrefix, cfg.CertDir, cfg.CertDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("cert_dir %s: %w", cfg.CertDir, err)
	}
	r := &Rotator{cfg: cfg}
	mctx := withKlog(ctx, cfg.Log.With("certificate", ClientPairPrefix))
	r.mgr, err = certificate.NewManager(&certificate.Config{
		ClientsetFn: r.clientset,
		Template: &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: cfg.UserName(), Organization: []string{NodesGroup}},
		},
		SignerName:       certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:        certificate.DefaultKubeletClientGetUsages,
		CertificateStore: store,
		Name:             ClientPairPrefix,
		Ctx:              &mctx,
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate manager: %w", err)
	}
	return r, nil
}

// clientset talks to the API server as the node while its certificate is
// valid, else with the bootstrap credential.
func (r *Rotator) clientset(current *tls.Certificate) (kubernetes.Interface, error) {
	if current == nil {
		if r.cfg.BootstrapKubeconfig == "" {
			return nil, fmt.Errorf("the client certificate in %s has expired and there is no bootstrap kubeconfig to request a new one", r.cfg.CertDir)
		}
		boot, err := loadBootstrap(r.cfg.BootstrapKubeconfig)
		if err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(boot.rest)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", r.cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", r.cfg.Kubeconfig, err)
	}
	rc.UserAgent = version.UserAgent("microlet-certificate-rotation")
	return kubernetes.NewForConfig(rc)
}

// Current is the certificate in use, nil before the first one.
func (r *Rotator) Current() *tls.Certificate { return r.mgr.Current() }

// Run renews the certificate until ctx ends.
func (r *Rotator) Run(ctx context.Context) {
	r.mgr.Start()
	if c := r.mgr.Current(); c != nil && c.Leaf != nil {
		r.cfg.Log.Info("client certificate rotation started", "not_after", c.Leaf.NotAfter, "file", r.cfg.CurrentPairFile())
	}
	<-ctx.Done()
	r.mgr.Stop()
}

// Run is Ensure, then rotation until ctx ends; ready is called once the
// kubeconfig is usable.
func Run(ctx context.Context, cfg Config, ready func()) error {
	if err := Ensure(ctx, cfg); err != nil {
		return err
	}
	if !Owned(cfg) {
		cfg.Log.Warn("the kubeconfig does not use the certificate directory's current pair; its credential is not rotated",
			"kubeconfig", cfg.Kubeconfig, "pair", cfg.CurrentPairFile())
		if ready != nil {
			ready()
		}
		<-ctx.Done()
		return nil
	}
	r, err := NewRotator(ctx, cfg)
	if err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	r.Run(ctx)
	return nil
}

// Owned reports whether cfg.Kubeconfig is the one Ensure writes: its client
// certificate is the current pair file.
func Owned(cfg Config) bool {
	raw, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		return false
	}
	ctx := raw.Contexts[raw.CurrentContext]
	if ctx == nil || raw.AuthInfos[ctx.AuthInfo] == nil {
		return false
	}
	return raw.AuthInfos[ctx.AuthInfo].ClientCertificate == cfg.CurrentPairFile()
}
