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
	"strings"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	cliflag "k8s.io/component-base/cli/flag"
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

// Policy is the protocol part of the server configuration the kubelet
// lets operators set: tlsMinVersion and tlsCipherSuites.
type Policy struct {
	// MinVersion is the lowest TLS version accepted; 0 means TLS 1.2.
	MinVersion uint16
	// CipherSuites are the TLS 1.2 suites offered; empty means Go's
	// defaults. TLS 1.3 suites are not configurable (Go's rule).
	CipherSuites []uint16
}

// ParsePolicy reads the kubelet's tlsMinVersion ("VersionTLS12", ...) and
// tlsCipherSuites (IANA names, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
// with the kubelet's own parsers (k8s.io/component-base/cli/flag), naming
// the field at fault. It also returns what the kubelet warns about: ciphers
// that Go counts as insecure, and cipher suites given with a TLS 1.3
// minimum, where they have no effect.
func ParsePolicy(minVersion string, cipherSuites []string) (p Policy, warnings []string, err error) {
	if p.MinVersion, err = cliflag.TLSVersion(minVersion); err != nil {
		return Policy{}, nil, fmt.Errorf("tls_min_version: %w (possible values: %s)", err, strings.Join(cliflag.TLSPossibleVersions(), ", "))
	}
	if p.CipherSuites, err = cliflag.TLSCipherSuites(cipherSuites); err != nil {
		return Policy{}, nil, fmt.Errorf("tls_cipher_suites: %w", err)
	}
	insecure := cliflag.InsecureTLSCiphers()
	for _, name := range cipherSuites {
		if _, bad := insecure[name]; bad {
			warnings = append(warnings, "tls_cipher_suites: "+name+" is an insecure cipher suite")
		}
	}
	if p.MinVersion == tls.VersionTLS13 && len(p.CipherSuites) > 0 {
		warnings = append(warnings, "tls_cipher_suites is ignored: TLS 1.3 cipher suites are not configurable and tls_min_version is VersionTLS13")
	}
	return p, warnings, nil
}

// TLSConfig is the server configuration: the policy's minimum version (TLS
// 1.2 when unset) and cipher suites, the current certificate on every
// handshake, and — when clientCA is not nil — a request for a client
// certificate signed by it. Verification is left to the x509 authenticator,
// as in the kubelet, so requests with a bearer token and no certificate
// still get through the handshake.
func (s *Source) TLSConfig(clientCA dynamiccertificates.CAContentProvider, policy Policy) *tls.Config {
	minVersion := policy.MinVersion
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	base := &tls.Config{
		MinVersion:   minVersion,
		CipherSuites: policy.CipherSuites,
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
