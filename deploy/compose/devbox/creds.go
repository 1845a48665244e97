package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// validity: a dev box may stay up for weeks; nothing here leaves loopback.
const validity = 365 * 24 * time.Hour

// Files of the credentials dir. The compose file refers to them by name.
const (
	caCert          = "ca.crt"
	caKey           = "ca.key"
	servingCert     = "serving.crt"
	servingKey      = "serving.key"
	saKey           = "sa.key"
	saPub           = "sa.pub"
	tokensCSV       = "tokens.csv"
	adminCert       = "admin.crt"
	adminKey        = "admin.key"
	adminKubeconfig = "admin.kubeconfig"
	nodeKubeconfig  = "node.kubeconfig"
	nodeToken       = "node.token"
	nodeNameFile    = "node.name"
)

// writeCredentials creates everything once. When the dir already holds a CA
// only what changed is redone (the node name or the server URL), so the
// apiserver's CA and tokens survive `compose up` after `compose stop`.
func writeCredentials(dir, node, server string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, key, err := loadCA(dir)
	if errors.Is(err, fs.ErrNotExist) {
		ca, key, err = newCA(dir)
	}
	if err != nil {
		return err
	}
	if !exists(filepath.Join(dir, servingCert)) {
		hosts := []string{"127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
		c, k, err := sign(ca, key, "kube-apiserver", nil, hosts, x509.ExtKeyUsageServerAuth)
		if err != nil {
			return err
		}
		if err := write(dir, servingCert, c, servingKey, k); err != nil {
			return err
		}
	}
	if !exists(filepath.Join(dir, saKey)) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		priv, err := pemKey(k)
		if err != nil {
			return err
		}
		der, err := x509.MarshalPKIXPublicKey(k.Public())
		if err != nil {
			return err
		}
		if err := write(dir, saKey, priv, saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})); err != nil {
			return err
		}
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, caCert))
	if err != nil {
		return err
	}
	if !exists(filepath.Join(dir, adminCert)) {
		c, k, err := sign(ca, key, "microlet-admin", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
		if err != nil {
			return err
		}
		if err := write(dir, adminCert, c, adminKey, k); err != nil {
			return err
		}
	}
	ac, err := os.ReadFile(filepath.Join(dir, adminCert))
	if err != nil {
		return err
	}
	ak, err := os.ReadFile(filepath.Join(dir, adminKey))
	if err != nil {
		return err
	}
	if err := writeKubeconfig(filepath.Join(dir, adminKubeconfig), server, caPEM, "microlet-admin", ac, ak, ""); err != nil {
		return err
	}

	// The node credential: a client certificate in the kubeconfig and a
	// token for clients that prefer one; both name system:node:<node>.
	old, _ := os.ReadFile(filepath.Join(dir, nodeNameFile))
	if string(old) != node || !exists(filepath.Join(dir, nodeToken)) {
		tok := randomToken()
		csv := fmt.Sprintf("%s,system:node:%s,node-%s,\"system:nodes\"\n", tok, node, node)
		if err := write(dir, nodeToken, []byte(tok+"\n"), tokensCSV, []byte(csv), nodeNameFile, []byte(node)); err != nil {
			return err
		}
	}
	nc, nk, err := sign(ca, key, "system:node:"+node, []string{"system:nodes"}, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return err
	}
	if err := writeKubeconfig(filepath.Join(dir, nodeKubeconfig), server, caPEM, "system:node:"+node, nc, nk, ""); err != nil {
		return err
	}
	fmt.Printf("devbox: credentials for node %s and %s in %s\n", node, server, dir)
	return nil
}

func newCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "microlet-devbox-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("self-sign the CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	kp, err := pemKey(key)
	if err != nil {
		return nil, nil, err
	}
	// The key first: a CA certificate without its key would be loaded next
	// time and fail.
	if err := write(dir, caKey, kp, caCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})); err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func loadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	cp, err := os.ReadFile(filepath.Join(dir, caCert))
	if err != nil {
		return nil, nil, err
	}
	kp, err := os.ReadFile(filepath.Join(dir, caKey))
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(cp)
	kb, _ := pem.Decode(kp)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s: %s or %s holds no PEM block; remove the volume to start over", dir, caCert, caKey)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", caCert, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", caKey, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: not a signing key", caKey)
	}
	return cert, signer, nil
}

// sign issues a certificate for cn (user name) in orgs (groups), for hosts
// when it serves.
func sign(ca *x509.Certificate, caKey crypto.Signer, cn string, orgs, hosts []string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign %s: %w", cn, err)
	}
	kp, err := pemKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), kp, nil
}

func writeKubeconfig(path, server string, caPEM []byte, user string, certPEM, keyPEM []byte, token string) error {
	const name = "microlet-devbox"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM, Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func pemKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// write writes name/content pairs with mode 0600 through a temp file and
// rename, so a crash never leaves half a key behind.
func write(dir string, pairs ...any) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		name := pairs[i].(string)
		data := pairs[i+1].([]byte)
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}
