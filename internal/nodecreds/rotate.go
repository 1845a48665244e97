package nodecreds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/certificate"

	"github.com/microlet/microlet/internal/version"
)

// WallCheckPeriod is how often a Rotator compares the wall clock with the
// certificate's rotation time.
const WallCheckPeriod = time.Minute

// latestRotation is the part of a certificate's lifetime after which the
// certificate manager has rotated it at the latest (it picks 70–90 %).
const latestRotation = 0.9

// Rotator renews the node's client certificate before it expires: client-go's
// certificate manager on the FileStore Ensure wrote.
//
// The manager computes when to rotate once per certificate and then waits on
// a timer, which runs on the monotonic clock: when the wall clock jumps
// forward (a step, or a machine that slept — Linux's monotonic clock stops
// while suspended) past that time, the manager goes on waiting for as long
// as it had left, while the API server, on wall time, sees the certificate
// expire. The Rotator checks the wall clock every WallCheckPeriod and, once
// it is past the latest time the manager would have rotated the certificate
// in use, starts a new manager, which finds the time passed and rotates at
// once; once per certificate, so a failing rotation keeps the manager's
// own retries.
type Rotator struct {
	cfg    Config
	newMgr func() (certificate.Manager, error)

	mu  sync.Mutex
	mgr certificate.Manager

	// Read and written by Run's goroutine only.
	leaf      *x509.Certificate // the last certificate seen in use
	restarted string            // serial of the certificate the manager was restarted for
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
	r.newMgr = func() (certificate.Manager, error) {
		return certificate.NewManager(&certificate.Config{
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
	}
	if r.mgr, err = r.newMgr(); err != nil {
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

func (r *Rotator) manager() certificate.Manager {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mgr
}

// Current is the certificate in use, nil before the first one.
func (r *Rotator) Current() *tls.Certificate { return r.manager().Current() }

// Run renews the certificate until ctx ends.
func (r *Rotator) Run(ctx context.Context) {
	mgr := r.manager()
	mgr.Start()
	if c := mgr.Current(); c != nil && c.Leaf != nil {
		r.leaf = c.Leaf
		r.cfg.Log.Info("client certificate rotation started", "not_after", c.Leaf.NotAfter, "file", r.cfg.CurrentPairFile())
	}
	tk := r.cfg.clock.NewTicker(WallCheckPeriod)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			r.manager().Stop()
			return
		case <-tk.C():
			r.checkWallClock()
		}
	}
}

// checkWallClock starts a new certificate manager when the wall clock is
// past the latest rotation time of the certificate in use (or of the last
// one seen, when the manager no longer hands out an expired one) and the
// manager was not restarted for it yet.
func (r *Rotator) checkWallClock() {
	mgr := r.manager()
	if c := mgr.Current(); c != nil && c.Leaf != nil {
		r.leaf = c.Leaf
	}
	leaf := r.leaf
	if leaf == nil {
		return
	}
	// Round(0): the wall reading alone, the one the certificate is judged by.
	now := r.cfg.clock.Now().Round(0)
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	due := leaf.NotBefore.Add(time.Duration(float64(life) * latestRotation))
	serial := leaf.SerialNumber.String()
	if now.Before(due) || r.restarted == serial {
		return
	}
	next, err := r.newMgr()
	if err != nil {
		r.cfg.Log.Error("the clock is past the client certificate's rotation time, but a new certificate manager cannot be made; the current one keeps waiting", "err", err)
		return
	}
	r.restarted = serial
	r.cfg.Log.Warn("the clock is past the client certificate's rotation time and it was not rotated (the clock jumped forward, or the machine slept); restarting rotation",
		"not_after", leaf.NotAfter, "rotate_by", due, "now", now)
	mgr.Stop()
	r.mu.Lock()
	r.mgr = next
	r.mu.Unlock()
	next.Start()
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
