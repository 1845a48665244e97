package controlplane

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// WriteKubeconfig writes a self-contained kubeconfig (everything embedded,
// no file references) for user at server, authenticating with a client
// certificate, a bearer token, or both. Being self-contained, it can be
// copied into a container or another machine as is.
func WriteKubeconfig(path, server string, caPEM []byte, user string, certPEM, keyPEM []byte, token string) error {
	const name = "microlet"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM, Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user}
	cfg.CurrentContext = name
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// WriteNodeKubeconfig signs a fresh credential for system:node:<node> and
// writes a kubeconfig for it pointing at server. It needs only the PKI, so
// it also serves a control plane started by another process (LoadPKI), e.g.
// a dev control plane that containers reach under another address.
func (p *PKI) WriteNodeKubeconfig(path, server, node string) error {
	certPEM, keyPEM, err := p.NodeCert(node)
	if err != nil {
		return err
	}
	return WriteKubeconfig(path, server, p.CACertPEM, "system:node:"+node, certPEM, keyPEM, "")
}
