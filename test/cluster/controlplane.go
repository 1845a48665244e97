package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// ControlPlaneDir is the control plane's state in the control-plane node
// (on its /var volume).
const ControlPlaneDir = "/var/lib/microlet-controlplane"

// RunControlPlane runs in the control-plane node (`microlet-cluster
// controlplane`, started by the node's entrypoint): etcd, kube-apiserver,
// kube-scheduler and kube-controller-manager v1.36.3 with the cluster's
// address plan, node IPAM, bootstrap tokens and the node CSR approver. It
// writes into shared the CA (ca.crt), a bootstrap kubeconfig every node
// joins with (bootstrap-kubelet.conf) and the admin kubeconfig
// (admin.conf), all naming the API server at ip, and runs until ctx ends.
//
// A restarted control-plane node starts a new cluster (a new CA, an empty
// etcd): the nodes' credentials no longer fit, so `make cluster` recreates
// the cluster rather than restarting that container.
func RunControlPlane(ctx context.Context, shared, ip string) error {
	if err := os.RemoveAll(ControlPlaneDir); err != nil {
		return err
	}
	server := fmt.Sprintf("https://%s:%d", ip, APIServerPort)
	frontProxy, err := frontProxyArgs(filepath.Join(ControlPlaneDir, "front-proxy"))
	if err != nil {
		return err
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Dir:         ControlPlaneDir,
		BindAddress: "0.0.0.0", APIServerPort: APIServerPort,
		// The kubernetes Service's ClusterIP is the first of ServiceCIDR.
		ExtraSANs:          []string{ip, "10.96.0.1", "kubernetes.default.svc." + ClusterDomain},
		BootstrapTokenAuth: true,
		Scheduler:          true, ControllerManager: true,
		StartTimeout: 5 * time.Minute,
		ExtraAPIServerArgs: append([]string{
			// Pods reach the API server through the kubernetes Service,
			// whose endpoint is this address.
			"--advertise-address=" + ip, "--endpoint-reconciler-type=lease",
		}, frontProxy...),
		ExtraControllerManagerArgs: []string{
			"--allocate-node-cidrs=true", "--cluster-cidr=" + PodCIDR, "--node-cidr-mask-size=24",
			"--service-cluster-ip-range=" + ServiceCIDR,
		},
	})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	token := controlplane.NewBootstrapToken()
	if err := controlplane.EnsureBootstrapToken(ctx, cs, token, 7*24*time.Hour); err != nil {
		return err
	}
	ca := cp.PKI().CACertPEM
	admin := cp.AdminConfig()
	for _, f := range []struct {
		name  string
		write func(string) error
	}{
		{"ca.crt", func(p string) error { return os.WriteFile(p, ca, 0o644) }},
		{"bootstrap-kubelet.conf", func(p string) error {
			return controlplane.WriteKubeconfig(p, server, ca, "kubelet-bootstrap", nil, nil, token)
		}},
		// Last: the harness waits for it.
		{"admin.conf", func(p string) error {
			return controlplane.WriteKubeconfig(p, server, ca, controlplane.AdminUser, admin.CertData, admin.KeyData, "")
		}},
	} {
		p := filepath.Join(shared, f.name)
		if err := f.write(p + ".tmp"); err != nil {
			return err
		}
		if err := os.Rename(p+".tmp", p); err != nil {
			return err
		}
	}
	fmt.Printf("control plane ready at %s\n", server)
	<-ctx.Done()
	return nil
}

// frontProxyUser is the aggregation layer's client identity.
const frontProxyUser = "front-proxy-client"

// frontProxyArgs makes the aggregation layer's PKI in dir, as kubeadm's
// front-proxy CA and client certificate, and returns the API server flags
// that use it: the API server proxies aggregated APIs (metrics-server's
// metrics.k8s.io) with that client certificate and the requesting user in
// X-Remote-* headers, which the extension API server trusts only from that
// CA and name (it reads them from kube-system's
// extension-apiserver-authentication ConfigMap).
func frontProxyArgs(dir string) ([]string, error) {
	pki, err := controlplane.NewPKI(dir, nil)
	if err != nil {
		return nil, fmt.Errorf("front-proxy PKI: %w", err)
	}
	certPEM, keyPEM, err := pki.ClientCert(frontProxyUser)
	if err != nil {
		return nil, err
	}
	cert, key := filepath.Join(dir, "front-proxy-client.crt"), filepath.Join(dir, "front-proxy-client.key")
	if err := os.WriteFile(cert, certPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
		return nil, err
	}
	return []string{
		"--requestheader-client-ca-file=" + filepath.Join(dir, "ca.crt"),
		"--requestheader-allowed-names=" + frontProxyUser,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + cert,
		"--proxy-client-key-file=" + key,
	}, nil
}
