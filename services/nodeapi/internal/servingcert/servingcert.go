package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Source serves a certificate and key pair from files, following changes.
type Source struct {
	content    *dynamiccertificates.DynamicCertKeyPairContent
	selfSigned bool
	// rotating, when set, is the certificate manager serving instead of
	// files (Rotating).
	rotating *rotating

	mu      sync.Mutex
	lastPEM []byte
	lastKey []byte
	parsed  *tls.Certificate
}

// FromFiles serves certFile and keyFile; both must exist and match.
func FromFiles(certFile, keyFile string) (*Source, error) {
	c, err := dynamiccertificates.NewDynamicServingContentFromFiles("kubelet-serving", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("serving certificate %s / %s: %w", certFile, keyFile, err)
	}
	return &Source{content: c}, nil
}

// SelfSigned serves dir/kubelet.crt and dir/kubelet.key, generating a
// self-signed pair for host (plus any extra IPs and DNS names) first when
// they are missing or unreadable, as the kubelet does.
func SelfSigned(dir, host string, ips []net.IP, dnsNames []string) (*Source, error) {
	certFile, keyFile := filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
	ok, _ := certutil.CanReadCertAndKey(certFile, keyFile)
	if ok {
		if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
			ok = false // corrupt or mismatched: make a new pair
		}
	}
	if !ok {
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, ips, dnsNames)
		if err != nil {
			return nil, fmt.Errorf("self-signed serving certificate: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("cert_dir %s: %w", dir, err)
		}
		// The key first: a crash in between leaves no certificate, which
		// the next start regenerates, rather than a certificate whose key
		// is missing.
		if err := keyutil.WriteKey(keyFile, keyPEM); err != nil {
			return nil, fmt.Errorf("write %s: %w", keyFile, err)
		}
		if err := certutil.WriteCert(certFile, certPEM); err != nil {
			return nil, fmt.Errorf("write %s: %w", certFile, err)
		}
	}
	s, err := FromFiles(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	s.selfSigned = true
	return s, nil
}

// SelfSignedCert reports whether the certificate was generated here.
func (s *Source) SelfSignedCert() bool { return s.selfSigned }

// Run follows changes of the files (or renews the certificate) until ctx ends.
func (s *Source) Run(ctx context.Context) {
	if s.rotating != nil {
		s.rotating.run(ctx)
		return
	}
	s.content.Run(ctx, 1)
}

// CertificatePEM is the certificate chain in use now.
func (s *Source) CertificatePEM() []byte {
	if s.rotating != nil {
		return s.rotating.certificatePEM()
	}
	c, _ := s.content.CurrentCertKeyContent()
	return c
}

// certificate parses the current pair, once per change.
func (s *Source) certificate() (*tls.Certificate, error) {
	if s.rotating != nil {
		return s.rotating.current()
	}
	certPEM, keyPEM := s.content.CurrentCertKeyContent()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parsed != nil && bytes.Equal(certPEM, s.lastPEM) && bytes.Equal(keyPEM, s.lastKey) {
		return s.parsed, nil
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	s.parsed, s.lastPEM, s.lastKey = &c, certPEM, keyPEM
	return s.parsed, nil
}

// TLSConfig is the server configuration: TLS 1.2 or later, the current
// certificate on every handshake, and — when clientCA is not nil — a request
// for a client certificate signed by it. Verification is left to the x509
// authenticator, as in the kubelet, so requests with a bearer token and no
// certificate still get through the handshake.
func (s *Source) TLSConfig(clientCA dynamiccertificates.CAContentProvider) *tls.Config {
	base := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.certificate()
		},
		NextProtos: []string{"h2", "http/1.1"},
	}
	if clientCA == nil {
		return base
	}
	base.ClientAuth = tls.RequestClientCert
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(clientCA.CurrentCABundleContent())
		c.ClientCAs = pool
		return c, nil
	}
	return base
}
