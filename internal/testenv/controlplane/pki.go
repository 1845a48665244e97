package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// File names inside a PKI directory. They are part of the on-disk contract
// with hack/devcontrolplane's export mode, which reloads a running dev
// control plane's CA to sign node credentials for it.
const (
	caCertFile      = "ca.crt"
	caKeyFile       = "ca.key"
	servingCertFile = "serving.crt"
	servingKeyFile  = "serving.key"
	saKeyFile       = "sa.key"
	saPubFile       = "sa.pub"
)

// certValidity is long enough for a dev box left running for weeks, and
// short-lived certificates buy nothing on a throwaway loopback cluster.
const certValidity = 365 * 24 * time.Hour

// PKI is the certificate authority of one control plane. A single CA signs
// the apiserver's serving certificate and every client certificate, so one
// CA file is all a kubeconfig needs.
type PKI struct {
	// Dir holds the PEM files (see LoadPKI).
	Dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	// CACertPEM is the CA certificate clients trust and the apiserver uses
	// to verify client certificates.
	CACertPEM []byte
}

// NewPKI creates a CA, a serving certificate valid for 127.0.0.1, localhost
// and sans, an ECDSA service-account key pair and the API server's kubelet
// client credential (EnsureKubeletClientCert), all written to dir.
func NewPKI(dir string, sans []string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "microlet-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	caCert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, caCert: caCert, caKey: caKey, CACertPEM: pemCert(der)}
	keyPEM, err := pemKey(caKey)
	if err != nil {
		return nil, err
	}
	if err := writeFiles(dir, map[string][]byte{caCertFile: p.CACertPEM, caKeyFile: keyPEM}); err != nil {
		return nil, err
	}

	hosts := append([]string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}, sans...)
	certPEM, servKeyPEM, err := p.sign("kube-apiserver", nil, hosts, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saPriv, err := pemKey(saKey)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}
	saPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	if err := writeFiles(dir, map[string][]byte{
		servingCertFile: certPEM, servingKeyFile: servKeyPEM,
		saKeyFile: saPriv, saPubFile: saPub,
	}); err != nil {
		return nil, err
	}
	return p, p.EnsureKubeletClientCert()
}

// LoadPKI reads the CA that NewPKI wrote to dir, so credentials can be
// signed for a control plane started by another process.
func LoadPKI(dir string) (*PKI, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, caCertFile))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s: no PEM block in %s or %s", dir, caCertFile, caKeyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: key cannot sign", caKeyFile)
	}
	return &PKI{Dir: dir, caCert: cert, caKey: signer, CACertPEM: certPEM}, nil
}

// ClientCert signs a client certificate for user cn in groups orgs; the
// apiserver maps CN to the user name and O to the groups.
func (p *PKI) ClientCert(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	if cn == "" {
		return nil, nil, errors.New("client certificate: empty common name")
	}
	return p.sign(cn, orgs, nil, x509.ExtKeyUsageClientAuth)
}

// NodeCert signs the credential a kubelet would hold for node: user
// system:node:<node> in group system:nodes, which is what the Node
// authorizer and NodeRestriction key on.
func (p *PKI) NodeCert(node string) (certPEM, keyPEM []byte, err error) {
	if node == "" {
		return nil, nil, errors.New("node certificate: empty node name")
	}
	return p.ClientCert("system:node:"+node, "system:nodes")
}

// EnsureKubeletClientCert writes the client credential the API server
// presents to nodes' kubelet APIs (user KubeletClientUser in group
// KubeletClientGroup) to KubeletClientCertFile and KubeletClientKeyFile in
// Dir, unless both are there already: a credentials directory made before
// they existed gains them, and a second call rotates nothing.
func (p *PKI) EnsureKubeletClientCert() error {
	_, certErr := os.Stat(p.path(KubeletClientCertFile))
	_, keyErr := os.Stat(p.path(KubeletClientKeyFile))
	if certErr == nil && keyErr == nil {
		return nil
	}
	certPEM, keyPEM, err := p.ClientCert(KubeletClientUser, KubeletClientGroup)
	if err != nil {
		return err
	}
	return writeFiles(p.Dir, map[string][]byte{KubeletClientCertFile: certPEM, KubeletClientKeyFile: keyPEM})
}

// KubeletServingCert signs a serving certificate for node's kubelet API
// (nodeapi), valid for hosts (IP addresses or DNS names) and the node
// name, with the subject a kubelet's serving-certificate request carries
// (system:node:<node> in system:nodes). A control plane started with
// Options.VerifyKubeletServingCerts trusts it; by default the API server
// does not check node serving certificates at all.
func (p *PKI) KubeletServingCert(node string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	if node == "" {
		return nil, nil, errors.New("kubelet serving certificate: empty node name")
	}
	if !slices.Contains(hosts, node) {
		hosts = append(slices.Clone(hosts), node)
	}
	return p.sign("system:node:"+node, []string{"system:nodes"}, hosts, x509.ExtKeyUsageServerAuth)
}

func (p *PKI) sign(cn string, orgs, hosts []string, usage x509.ExtKeyUsage) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign certificate for %q: %w", cn, err)
	}
	keyPEM, err := pemKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemCert(der), keyPEM, nil
}

func (p *PKI) path(name string) string { return filepath.Join(p.Dir, name) }

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		// crypto/rand does not fail on Linux; a fixed serial would still work.
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func pemKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func writeFiles(dir string, files map[string][]byte) error {
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
