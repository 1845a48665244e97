package servingcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/certificate"
	"k8s.io/klog/v2"
)

// ServerPairPrefix names the rotated serving pairs in the certificate
// directory: kubelet-server-<time>.pem and kubelet-server-current.pem, as
// the kubelet names them.
const ServerPairPrefix = "kubelet-server"

// ErrNoCertificate is the handshake error while the first certificate has
// not been issued (the CSR waits for approval).
var ErrNoCertificate = errors.New("no serving certificate yet: the node's kubernetes.io/kubelet-serving certificate signing request is not approved and signed")

// rotating serves what a kubelet-serving certificate manager holds.
type rotating struct {
	mgr      certificate.Manager
	informer cache.SharedIndexInformer
	log      *slog.Logger

	mu      sync.Mutex
	lastPEM []byte
	last    *tls.Certificate
}

// Rotating serves a certificate from the cluster's kubelet-serving signer
// for system:node:<node>, with the node's host names and IPs as the Node
// object shows them (nodestatusd writes its addresses there), renewed by
// client-go's certificate manager at 70–90 % of its lifetime and whenever
// the addresses change. The pairs are kept in dir (kubelet-server-*.pem),
// so a restart serves the last one at once. Until the first request is
// approved, handshakes fail with ErrNoCertificate, as the kubelet's do.
// client is the node's own (its CSRs are made with its credential).
func Rotating(ctx context.Context, dir, node string, client kubernetes.Interface, log *slog.Logger) (*Source, error) {
	store, err := certificate.NewFileStore(ServerPairPrefix, dir, dir, "", "")
	if err != nil {
		return nil, fmt.Errorf("cert_dir %s: %w", dir, err)
	}
	r := &rotating{log: log}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}))
	r.informer = factory.Core().V1().Nodes().Informer()
	mctx := klog.NewContext(ctx, logr.FromSlogHandler(log.With("certificate", ServerPairPrefix).Handler()))
	r.mgr, err = certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate: func() *x509.CertificateRequest {
			obj, ok, _ := r.informer.GetStore().GetByKey(node)
			if !ok {
				return nil
			}
			return servingTemplate(node, obj.(*corev1.Node).Status.Addresses)
		},
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Name:             "kubelet-serving",
		Ctx:              &mctx,
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate manager: %w", err)
	}
	return &Source{rotating: r}, nil
}

func (r *rotating) run(ctx context.Context) {
	go r.informer.Run(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), r.informer.HasSynced)
	r.mgr.Start()
	<-ctx.Done()
	r.mgr.Stop()
}

func (r *rotating) current() (*tls.Certificate, error) {
	c := r.mgr.Current()
	if c == nil {
		return nil, ErrNoCertificate
	}
	return c, nil
}

func (r *rotating) certificatePEM() []byte {
	c := r.mgr.Current()
	if c == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c == r.last {
		return r.lastPEM
	}
	var out []byte
	for _, der := range c.Certificate {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	r.last, r.lastPEM = c, out
	return out
}

// servingTemplate is the request for node's serving certificate: DNS names
// from its host-name and DNS addresses, IPs from its IP addresses; nil
// while it has none (nothing to ask for yet).
func servingTemplate(node string, addrs []corev1.NodeAddress) *x509.CertificateRequest {
	var (
		dns []string
		ips []net.IP
	)
	for _, a := range addrs {
		switch a.Type {
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			if a.Address != "" && !slices.Contains(dns, a.Address) {
				dns = append(dns, a.Address)
			}
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			ip := net.ParseIP(a.Address)
			if ip != nil && !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		}
	}
	if len(dns) == 0 && len(ips) == 0 {
		return nil
	}
	return &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames:    dns,
		IPAddresses: ips,
	}
}
