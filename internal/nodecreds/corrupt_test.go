package nodecreds

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
)

// TestCorruptKubeconfigQuarantined: a node kubeconfig that a crash tore
// in half, or that holds garbage, is moved aside as <name>.corrupt-<time>
// with a Warning naming both files, and Ensure writes a usable one in its
// place from the stored client certificate and the bootstrap kubeconfig
// (no API server needed: the stored pair is still valid). Temporary files
// a crash left next to it are removed.
func TestCorruptKubeconfigQuarantined(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("system:node:n1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{NodeName: "n1", Kubeconfig: filepath.Join(dir, "kubeconfig"), CertDir: filepath.Join(dir, "pki")}
	if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := certificate.NewFileStore(ClientPairPrefix, cfg.CertDir, cfg.CertDir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	boot := clientcmdapi.NewConfig()
	boot.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", CertificateAuthorityData: certPEM}
	boot.AuthInfos["a"] = &clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef"}
	boot.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "a"}
	boot.CurrentContext = "x"
	cfg.BootstrapKubeconfig = filepath.Join(dir, "bootstrap.kubeconfig")
	if err := clientcmd.WriteToFile(*boot, cfg.BootstrapKubeconfig); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(cfg.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"torn":    good[:len(good)/2],
		"garbage": []byte("\x00\x17clusters: [{{not yaml"),
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(cfg.Kubeconfig, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			leftover := filepath.Join(dir, ".kubeconfig.statefile-tmp-123")
			if err := os.WriteFile(leftover, good[:10], 0o600); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			c := cfg
			c.Log = slog.New(slog.NewTextHandler(&log, nil))
			if err := Ensure(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if ok, why, _ := kubeconfigUsable(cfg.Kubeconfig, time.Now()); !ok {
				t.Fatalf("kubeconfig after Ensure: %s", why)
			}
			if _, err := os.Stat(leftover); !os.IsNotExist(err) {
				t.Errorf("temporary file a crash left is still there: %v", err)
			}
			aside, _ := filepath.Glob(cfg.Kubeconfig + ".corrupt-*")
			var kept string
			for _, p := range aside {
				if b, _ := os.ReadFile(p); bytes.Equal(b, bad) {
					kept = p
				}
			}
			if kept == "" {
				t.Fatalf("the corrupt kubeconfig was not kept aside (found %v)", aside)
			}
			if l := log.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, kept) {
				t.Errorf("no Warning naming %s:\n%s", kept, l)
			}
			_ = os.Remove(kept)
		})
	}
}
