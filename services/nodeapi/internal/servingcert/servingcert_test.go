package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"

	"github.com/microlet/microlet/internal/testenv"
)

func parse(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSelfSigned: generated for the host, kept 0600, reused by the next
// start, regenerated when unreadable.
func TestSelfSigned(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	a, err := SelfSigned(dir, "node-1", []net.IP{net.ParseIP("10.1.2.3")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !a.SelfSignedCert() {
		t.Error("SelfSignedCert() = false")
	}
	c := parse(t, a.CertificatePEM())
	if err := c.VerifyHostname("node-1"); err != nil {
		t.Errorf("certificate not for node-1: %v", err)
	}
	if err := c.VerifyHostname("10.1.2.3"); err != nil {
		t.Errorf("certificate not for 10.1.2.3: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "kubelet.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", st, err)
	}
	b, err := SelfSigned(dir, "node-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.CertificatePEM(), b.CertificatePEM()) {
		t.Error("a restart generated a new certificate instead of reusing the kept one")
	}
	if err := os.WriteFile(filepath.Join(dir, "kubelet.crt"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c2, err := SelfSigned(dir, "node-1", nil, nil)
	if err != nil {
		t.Fatalf("an unreadable pair must be replaced: %v", err)
	}
	if bytes.Equal(c2.CertificatePEM(), a.CertificatePEM()) {
		t.Error("unreadable pair not regenerated")
	}
	if _, err := FromFiles(filepath.Join(dir, "nope.crt"), filepath.Join(dir, "nope.key")); err == nil {
		t.Error("FromFiles accepted missing files")
	}
}

// TestReload: a renewed pair written over the files is what new
// connections get, without a restart.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(host string) []byte {
		cert, key, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Replace atomically, as a certificate manager does.
		for f, b := range map[string][]byte{keyFile: key, certFile: cert} {
			if err := os.WriteFile(f+".tmp", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f+".tmp", f); err != nil {
				t.Fatal(err)
			}
		}
		return cert
	}
	write("first")
	src, err := FromFiles(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go src.Run(ctx)

	addr := serve(t, src.TLSConfig(nil, Policy{}))
	served := func() string {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads what is served
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got == "" || !bytes.Contains([]byte(got), []byte("first")) {
		t.Fatalf("served %q", got)
	}
	write("second")
	testenv.Eventually(t, "the renewed certificate served", time.Minute, func() error {
		if got := served(); !bytes.Contains([]byte(got), []byte("second")) {
			return errors.New("still " + got)
		}
		return nil
	})
}

// TestClientCA: with a client CA the server asks for a certificate (the CA
// named) but a client without one still completes the handshake.
func TestClientCA(t *testing.T) {
	dir := t.TempDir()
	src, err := SelfSigned(dir, "node-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _, err := certutil.GenerateSelfSignedCertKey("client-ca", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := dynamiccertificates.NewStaticCAContent("test", caPEM)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, src.TLSConfig(ca, Policy{}))
	var asked bool
	conn, err := tls.Dial("tcp", addr, &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // self-signed on purpose
		GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked = len(cri.AcceptableCAs) > 0
			return &tls.Certificate{}, nil
		},
	})
	if err != nil {
		t.Fatalf("handshake without a client certificate: %v", err)
	}
	_ = conn.Close()
	if !asked {
		t.Error("the server did not ask for a certificate from the client CA")
	}
}

// serve accepts TLS connections with cfg and completes their handshakes.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				_ = c.(*tls.Conn).Handshake()
				_ = c.Close()
			}()
		}
	}()
	return lis.Addr().String()
}

// TestPolicyRefusesWhatItExcludes: a real TLS client offering only a
// version below tlsMinVersion, or only a cipher suite left out of
// tlsCipherSuites, fails the handshake; one within the policy completes it.
func TestPolicyRefusesWhatItExcludes(t *testing.T) {
	src, err := SelfSigned(t.TempDir(), "node-1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const (
		allowed  = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
		excluded = "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
	)
	suite := func(name string) uint16 {
		for _, s := range tls.CipherSuites() {
			if s.Name == name {
				return s.ID
			}
		}
		t.Fatalf("no cipher suite %s", name)
		return 0
	}
	for _, tc := range []struct {
		name       string
		minVersion string
		ciphers    []string
		client     *tls.Config
		refused    bool
	}{
		{name: "TLS 1.2 client, default policy", client: &tls.Config{MaxVersion: tls.VersionTLS12}},
		{name: "TLS 1.1 client, default policy", client: &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, refused: true},
		{name: "TLS 1.2 client, minimum 1.3", minVersion: "VersionTLS13", client: &tls.Config{MaxVersion: tls.VersionTLS12}, refused: true},
		{name: "TLS 1.3 client, minimum 1.3", minVersion: "VersionTLS13", client: &tls.Config{MinVersion: tls.VersionTLS13}},
		{name: "allowed cipher", ciphers: []string{allowed},
			client: &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite(allowed)}}},
		{name: "excluded cipher", ciphers: []string{allowed},
			client: &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite(excluded)}}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, _, err := ParsePolicy(tc.minVersion, tc.ciphers)
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, src.TLSConfig(nil, policy))
			client := tc.client.Clone()
			client.InsecureSkipVerify = true //nolint:gosec // the test is about the protocol, not the certificate
			conn, err := tls.Dial("tcp", addr, client)
			if err == nil {
				_ = conn.Close()
			}
			switch {
			case tc.refused && err == nil:
				t.Fatalf("handshake completed (version %x, cipher %s); want it refused", conn.ConnectionState().Version, tls.CipherSuiteName(conn.ConnectionState().CipherSuite))
			case !tc.refused && err != nil:
				t.Fatalf("handshake refused: %v", err)
			}
		})
	}
}

// TestParsePolicy: the kubelet's names are read, a wrong one named with
// its field, and what the kubelet warns about is returned.
func TestParsePolicy(t *testing.T) {
	p, warnings, err := ParsePolicy("VersionTLS12", []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"})
	if err != nil || p.MinVersion != tls.VersionTLS12 || len(p.CipherSuites) != 1 || p.CipherSuites[0] != tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 || len(warnings) != 0 {
		t.Fatalf("ParsePolicy = %+v %v %v", p, warnings, err)
	}
	if _, _, err := ParsePolicy("TLS1.2", nil); err == nil || !strings.Contains(err.Error(), "tls_min_version") || !strings.Contains(err.Error(), "VersionTLS13") {
		t.Errorf("bad version: %v, want an error naming the field and the possible values", err)
	}
	if _, _, err := ParsePolicy("", []string{"TLS_NOPE"}); err == nil || !strings.Contains(err.Error(), "tls_cipher_suites") || !strings.Contains(err.Error(), "TLS_NOPE") {
		t.Errorf("bad cipher: %v, want an error naming the field and the suite", err)
	}
	_, warnings, err = ParsePolicy("VersionTLS13", []string{"TLS_RSA_WITH_RC4_128_SHA"})
	if err != nil || len(warnings) != 2 {
		t.Errorf("insecure cipher with a 1.3 minimum: warnings %q, err %v; want two warnings", warnings, err)
	}
}
