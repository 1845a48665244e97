package controlplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The optional components: kube-scheduler and kube-controller-manager, built
// from the same pinned k8s.io/kubernetes module as the kube-apiserver. Each
// name is its binary's, its log's (logs/<name>.log) and its files' stem.
const (
	KubeScheduler         = "kube-scheduler"
	KubeControllerManager = "kube-controller-manager"
)

// The components' identities. The apiserver's bootstrap RBAC already binds
// each to its built-in ClusterRole (system:kube-scheduler,
// system:kube-controller-manager) and lets both read the authentication
// ConfigMap in kube-system, so their client certificates need no setup.
const (
	SchedulerUser         = "system:kube-scheduler"
	ControllerManagerUser = "system:kube-controller-manager"
)

// ControllerManagerControllers is --controllers: every controller enabled
// by default ("*") plus the bootstrap-token signer and cleaner, which
// kubeadm enables too and which 1.36 still leaves off by default (under
// these names; kubeadm's bootstrapsigner and tokencleaner are aliases).
// The node IPAM controller runs but allocates nothing, as
// --allocate-node-cidrs stays off: microlet does not read spec.podCIDR.
const ControllerManagerControllers = "*,bootstrap-signer-controller,token-cleaner-controller"

// componentUsers maps a component to the user its client certificate names.
var componentUsers = map[string]string{
	KubeScheduler:         SchedulerUser,
	KubeControllerManager: ControllerManagerUser,
}

// ComponentKubeconfigFile and ComponentServingCertFile/KeyFile name a
// component's files: its kubeconfig (in the control plane's kubeconfig/
// directory, or next to the PKI in the compose box) and its serving
// certificate (in the PKI directory).
func ComponentKubeconfigFile(component string) string { return component + ".kubeconfig" }

// ComponentServingCertFile is the serving certificate of component in a PKI directory.
func ComponentServingCertFile(component string) string { return component + "-serving.crt" }

// ComponentServingKeyFile is the key of ComponentServingCertFile.
func ComponentServingKeyFile(component string) string { return component + "-serving.key" }

// WriteComponentCredentials writes what component (KubeScheduler or
// KubeControllerManager) needs to run against server: a self-contained
// kubeconfig at kubeconfigPath with a client certificate for its user
// (SchedulerUser, ControllerManagerUser), and a serving certificate for
// 127.0.0.1 and localhost, signed by the CA, in Dir
// (ComponentServingCertFile, ComponentServingKeyFile), so its /healthz can
// be checked against the CA instead of a self-signed certificate.
func (p *PKI) WriteComponentCredentials(component, kubeconfigPath, server string) error {
	user, ok := componentUsers[component]
	if !ok {
		return fmt.Errorf("component %q: want %s or %s", component, KubeScheduler, KubeControllerManager)
	}
	certPEM, keyPEM, err := p.ClientCert(user)
	if err != nil {
		return err
	}
	if err := WriteKubeconfig(kubeconfigPath, server, p.CACertPEM, user, certPEM, keyPEM, ""); err != nil {
		return err
	}
	servPEM, servKeyPEM, err := p.sign(component, nil, []string{"127.0.0.1", "localhost"}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return err
	}
	return writeFiles(p.Dir, map[string][]byte{
		ComponentServingCertFile(component): servPEM,
		ComponentServingKeyFile(component):  servKeyPEM,
	})
}

// commonComponentFlags wire a component to the apiserver with one
// kubeconfig for everything (its work, and delegated authentication and
// authorization of its own HTTPS endpoint, as kubeadm does), serve the CA-
// signed certificate and run without leader election: there is only one
// of each, and a lost lease would only make it exit.
//
// Client certificates are checked against the CA given here rather than
// looked up in kube-system/extension-apiserver-authentication: the
// apiserver runs without a front proxy, so that ConfigMap has no
// request-header CA and the lookup would log an error about it for ever.
// Bearer tokens still go to the apiserver (TokenReview).
func commonComponentFlags(component, pkiDir, kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--client-ca-file=" + filepath.Join(pkiDir, caCertFile),
		"--authentication-skip-lookup=true",
		"--tls-cert-file=" + filepath.Join(pkiDir, ComponentServingCertFile(component)),
		"--tls-private-key-file=" + filepath.Join(pkiDir, ComponentServingKeyFile(component)),
		"--leader-elect=false",
		"--profiling=false",
	}
}

// SchedulerFlags are kube-scheduler's flags for a control plane whose PKI
// is in pkiDir, with the kubeconfig WriteComponentCredentials wrote at
// kubeconfig. The caller adds --secure-port and --bind-address. The test
// control plane, the dev control plane and the compose dev box use them.
func SchedulerFlags(pkiDir, kubeconfig string) []string {
	return commonComponentFlags(KubeScheduler, pkiDir, kubeconfig)
}

// ControllerManagerFlags are kube-controller-manager's flags, like
// SchedulerFlags, plus what its controllers sign and publish with:
// the service-account key (tokens of legacy token Secrets), the CA as root
// CA (every namespace's kube-root-ca.crt) and as the CSR signer of the
// kubernetes.io/* signers, and a credential per controller
// (--use-service-account-credentials), so RBAC sees each controller as
// itself.
func ControllerManagerFlags(pkiDir, kubeconfig string) []string {
	return append(commonComponentFlags(KubeControllerManager, pkiDir, kubeconfig),
		"--service-account-private-key-file="+filepath.Join(pkiDir, saKeyFile),
		"--root-ca-file="+filepath.Join(pkiDir, caCertFile),
		"--cluster-signing-cert-file="+filepath.Join(pkiDir, caCertFile),
		"--cluster-signing-key-file="+filepath.Join(pkiDir, caKeyFile),
		"--use-service-account-credentials=true",
		"--controllers="+ControllerManagerControllers,
	)
}

// StartScheduler starts kube-scheduler against the control plane (it is a
// no-op while one runs) and returns once its /healthz answers. Start calls
// it for Options.Scheduler; GetFull for tests.
func (cp *ControlPlane) StartScheduler(ctx context.Context) error {
	return cp.startComponent(ctx, KubeScheduler)
}

// StartControllerManager starts kube-controller-manager like
// StartScheduler.
func (cp *ControlPlane) StartControllerManager(ctx context.Context) error {
	return cp.startComponent(ctx, KubeControllerManager)
}

// StopScheduler stops kube-scheduler, if it runs.
func (cp *ControlPlane) StopScheduler() error { return cp.stopComponent(KubeScheduler) }

// StopControllerManager stops kube-controller-manager, if it runs.
func (cp *ControlPlane) StopControllerManager() error {
	return cp.stopComponent(KubeControllerManager)
}

// SchedulerPID is kube-scheduler's process ID, 0 when it is not running.
func (cp *ControlPlane) SchedulerPID() int {
	return cp.pidOf(func() *process { return cp.comps[KubeScheduler] })
}

// ControllerManagerPID is kube-controller-manager's process ID, 0 when it
// is not running.
func (cp *ControlPlane) ControllerManagerPID() int {
	return cp.pidOf(func() *process { return cp.comps[KubeControllerManager] })
}

// startComponent runs one component on a free loopback port and waits for
// its /healthz. Starts and stops of one component are serialised by its
// lock in compMu; a Stop of the whole control plane racing a start stops
// the new process.
func (cp *ControlPlane) startComponent(ctx context.Context, name string) error {
	mu, ok := cp.compMu[name]
	if !ok {
		return fmt.Errorf("unknown component %q", name)
	}
	mu.Lock()
	defer mu.Unlock()
	cp.mu.Lock()
	running := cp.comps[name] != nil && !cp.comps[name].exited()
	stopped := cp.stopped
	cp.mu.Unlock()
	if stopped {
		return errors.New("control plane already stopped")
	}
	if running {
		return nil
	}
	var (
		bin   string
		err   error
		flags []string
		extra []string
	)
	kubeconfig := filepath.Join(cp.dir, "kubeconfig", ComponentKubeconfigFile(name))
	switch name {
	case KubeScheduler:
		bin, err = FindKubeScheduler()
		flags, extra = SchedulerFlags(cp.pki.Dir, kubeconfig), cp.opts.ExtraSchedulerArgs
	case KubeControllerManager:
		bin, err = FindKubeControllerManager()
		flags, extra = ControllerManagerFlags(cp.pki.Dir, kubeconfig), cp.opts.ExtraControllerManagerArgs
		if d := cp.opts.ClusterSigningDuration; d > 0 {
			flags = append(flags, "--cluster-signing-duration="+d.String())
		}
	default:
		return fmt.Errorf("unknown component %q", name)
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(kubeconfig); err != nil {
		if err := cp.pki.WriteComponentCredentials(name, kubeconfig, cp.host); err != nil {
			return fmt.Errorf("%s credentials: %w", name, err)
		}
	}
	client, err := cp.healthClient()
	if err != nil {
		return err
	}
	// Free ports are found by binding and releasing them, so another
	// process can win one first: such a loss is retried on a new port.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		args := append(append(slices.Clone(flags), "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port)), extra...)
		p, err := startProcess(name, bin, args, filepath.Join(cp.dir, "logs", name+".log"))
		if err != nil {
			return err
		}
		cp.mu.Lock()
		if cp.stopped {
			cp.mu.Unlock()
			_ = p.stop(stopGrace)
			return errors.New("control plane stopped while " + name + " started")
		}
		cp.comps[name] = p
		cp.mu.Unlock()
		url := "https://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
		err = cp.waitFor(ctx, p, func(ctx context.Context) error { return httpOK(ctx, client, url) })
		if err == nil {
			return nil
		}
		lastErr = fmt.Errorf("%s: %w", name, err)
		_ = p.stop(stopGrace)
		cp.mu.Lock()
		if cp.comps[name] == p {
			delete(cp.comps, name)
		}
		cp.mu.Unlock()
		if !p.addrInUse() {
			return lastErr
		}
	}
	return lastErr
}

func (cp *ControlPlane) stopComponent(name string) error {
	mu := cp.compMu[name]
	mu.Lock()
	defer mu.Unlock()
	cp.mu.Lock()
	p := cp.comps[name]
	delete(cp.comps, name)
	cp.mu.Unlock()
	return p.stop(stopGrace)
}

// healthClient checks the components' HTTPS endpoints against the CA that
// signed their serving certificates.
func (cp *ControlPlane) healthClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cp.pki.CACertPEM) {
		return nil, errors.New("control-plane CA: no certificate")
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}, nil
}

// componentsFromOptions lists the components Options asks Start for.
func componentsFromOptions(o Options) []string {
	var out []string
	if o.Scheduler {
		out = append(out, KubeScheduler)
	}
	if o.ControllerManager {
		out = append(out, KubeControllerManager)
	}
	return out
}

// startComponents starts names side by side (each waits for its own
// /healthz; in sequence the waits would add up).
func (cp *ControlPlane) startComponents(ctx context.Context, names []string) error {
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { errs[i] = cp.startComponent(ctx, n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// missingComponentBinaries finds the binaries of names up front, so Start
// fails with ErrMissingBinary before it spends seconds on etcd and the
// apiserver.
func missingComponentBinaries(names []string) error {
	var missing []string
	var first error
	for _, n := range names {
		find := FindKubeScheduler
		if n == KubeControllerManager {
			find = FindKubeControllerManager
		}
		if _, err := find(); err != nil {
			missing = append(missing, n)
			if first == nil {
				first = err
			}
		}
	}
	if first == nil {
		return nil
	}
	return fmt.Errorf("%w (missing: %s)", first, strings.Join(missing, ", "))
}
