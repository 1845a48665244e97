package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestWriteCredentials(t *testing.T) {
	dir := t.TempDir()
	if err := writeCredentials(dir, "node-a", "https://127.0.0.1:16443"); err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, caCert))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)

	cfg, err := clientcmd.LoadFromFile(filepath.Join(dir, nodeKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	user := cfg.AuthInfos["system:node:node-a"]
	if user == nil {
		t.Fatalf("node kubeconfig users: %v", cfg.AuthInfos)
	}
	if got := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server; got != "https://127.0.0.1:16443" {
		t.Fatalf("server %q", got)
	}
	if _, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData); err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(user.ClientCertificateData)
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:node-a" || len(cert.Subject.Organization) != 1 || cert.Subject.Organization[0] != "system:nodes" {
		t.Fatalf("node identity %v: the Node authorizer wants system:node:node-a in system:nodes", cert.Subject)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("node certificate does not chain to the CA: %v", err)
	}
	// The apiserver's kubelet client credential, named in the compose file.
	kc, err := tls.LoadX509KeyPair(filepath.Join(dir, controlplane.KubeletClientCertFile), filepath.Join(dir, controlplane.KubeletClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	kcert, _ := x509.ParseCertificate(kc.Certificate[0])
	if kcert.Subject.CommonName != controlplane.KubeletClientUser {
		t.Fatalf("kubelet client certificate %v", kcert.Subject)
	}
	if _, err := kcert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("kubelet client certificate does not chain to the CA: %v", err)
	}
	serving, err := tls.LoadX509KeyPair(filepath.Join(dir, servingCert), filepath.Join(dir, servingKey))
	if err != nil {
		t.Fatal(err)
	}
	sc, _ := x509.ParseCertificate(serving.Certificate[0])
	if _, err := sc.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Fatalf("serving certificate not valid for 127.0.0.1: %v", err)
	}

	// The scheduler's and controller manager's identities and serving
	// certificates, named in the compose file.
	for component, user := range map[string]string{controlplane.KubeScheduler: controlplane.SchedulerUser, controlplane.KubeControllerManager: controlplane.ControllerManagerUser} {
		ccfg, err := clientcmd.LoadFromFile(filepath.Join(dir, controlplane.ComponentKubeconfigFile(component)))
		if err != nil {
			t.Fatal(err)
		}
		auth := ccfg.AuthInfos[user]
		if auth == nil || ccfg.Clusters[ccfg.Contexts[ccfg.CurrentContext].Cluster].Server != "https://127.0.0.1:16443" {
			t.Fatalf("%s kubeconfig: users %v, clusters %v", component, ccfg.AuthInfos, ccfg.Clusters)
		}
		b, _ := pem.Decode(auth.ClientCertificateData)
		ccert, err := x509.ParseCertificate(b.Bytes)
		if err != nil || ccert.Subject.CommonName != user {
			t.Fatalf("%s client certificate %v (%v), want CN %s", component, ccert.Subject, err, user)
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, controlplane.ComponentServingCertFile(component)), filepath.Join(dir, controlplane.ComponentServingKeyFile(component)))
		if err != nil {
			t.Fatal(err)
		}
		leaf, _ := x509.ParseCertificate(pair.Certificate[0])
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
			t.Fatalf("%s serving certificate not valid for 127.0.0.1: %v", component, err)
		}
	}

	// A second run keeps the CA and the token; a new node name gets a new token.
	tok, _ := os.ReadFile(filepath.Join(dir, nodeToken))
	if err := writeCredentials(dir, "node-a", "https://127.0.0.1:16443"); err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, caCert))
	tok2, _ := os.ReadFile(filepath.Join(dir, nodeToken))
	kc2, _ := os.ReadFile(filepath.Join(dir, controlplane.KubeletClientCertFile))
	if string(kc2) != string(pemOf(kc.Certificate[0])) {
		t.Fatal("a second init rotated the kubelet client certificate")
	}
	if string(ca) != string(ca2) || string(tok) != string(tok2) {
		t.Fatal("a second init rotated the CA or the node token")
	}
	if err := writeCredentials(dir, "node-b", "https://127.0.0.1:16443"); err != nil {
		t.Fatal(err)
	}
	tok3, _ := os.ReadFile(filepath.Join(dir, nodeToken))
	if string(tok3) == string(tok) {
		t.Fatal("a new node name kept the old node's token")
	}
	csv, _ := os.ReadFile(filepath.Join(dir, tokensCSV))
	if want := "system:node:node-b"; !strings.Contains(string(csv), want) {
		t.Fatalf("tokens.csv %q lacks %s", csv, want)
	}
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
