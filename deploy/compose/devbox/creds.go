package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// Files of the credentials dir. The compose file refers to them by name.
const (
	caCert          = "ca.crt"
	servingCert     = "serving.crt"
	servingKey      = "serving.key"
	tokensCSV       = "tokens.csv"
	adminCert       = "admin.crt"
	adminKey        = "admin.key"
	adminKubeconfig = "admin.kubeconfig"
	nodeKubeconfig  = "node.kubeconfig"
	nodeToken       = "node.token"
	nodeNameFile    = "node.name"
	// The node joins with a bootstrap token, as with kubeadm join: the
	// bootstrap step stores the token as a Secret, microlet credentials
	// requests the node's certificate with the kubeconfig holding it.
	bootstrapToken      = "bootstrap.token"
	bootstrapKubeconfig = "bootstrap.kubeconfig"
)

// writeCredentials creates everything once. When the dir already holds a CA
// only what changed is redone (the node name or the server URL), so the
// apiserver's CA and tokens survive `compose up` after `compose stop`. The
// CA, serving certificate and service-account keys are the test control
// plane's PKI (controlplane.NewPKI), so the dev box and the tests run the
// same kube-apiserver setup.
func writeCredentials(dir, node, server string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	pki, err := controlplane.LoadPKI(dir)
	if errors.Is(err, fs.ErrNotExist) {
		pki, err = controlplane.NewPKI(dir, nil)
	}
	if err != nil {
		return err
	}
	// The apiserver's client credential for nodes' kubelet API
	// (--kubelet-client-certificate); a volume from before it existed gains it.
	if err := pki.EnsureKubeletClientCert(); err != nil {
		return err
	}
	if !exists(filepath.Join(dir, adminCert)) {
		c, k, err := pki.ClientCert("microlet-admin", "system:masters")
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
	if err := controlplane.WriteKubeconfig(filepath.Join(dir, adminKubeconfig), server, pki.CACertPEM, "microlet-admin", ac, ak, ""); err != nil {
		return err
	}
	// kube-scheduler's and kube-controller-manager's kubeconfigs (their own
	// identities) and serving certificates, re-signed on every run like
	// the kubeconfigs above, so a changed server address reaches them.
	for _, c := range []string{controlplane.KubeScheduler, controlplane.KubeControllerManager} {
		if err := pki.WriteComponentCredentials(c, filepath.Join(dir, controlplane.ComponentKubeconfigFile(c)), server); err != nil {
			return err
		}
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
	if err := pki.WriteNodeKubeconfig(filepath.Join(dir, nodeKubeconfig), server, node); err != nil {
		return err
	}
	if !exists(filepath.Join(dir, bootstrapToken)) {
		if err := write(dir, bootstrapToken, []byte(controlplane.NewBootstrapToken()+"\n")); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(filepath.Join(dir, bootstrapToken))
	if err != nil {
		return err
	}
	if err := controlplane.WriteKubeconfig(filepath.Join(dir, bootstrapKubeconfig), server, pki.CACertPEM, "kubelet-bootstrap", nil, nil, strings.TrimSpace(string(tok))); err != nil {
		return err
	}
	fmt.Printf("devbox: credentials for node %s and %s in %s\n", node, server, dir)
	return nil
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
