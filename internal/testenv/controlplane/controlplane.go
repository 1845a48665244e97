package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Defaults that match what a kubeadm cluster uses, so objects look familiar.
const (
	// ServiceClusterIPRange is the --service-cluster-ip-range given to the apiserver.
	ServiceClusterIPRange = "10.96.0.0/16"
	// ServiceAccountIssuer is the --service-account-issuer given to the apiserver.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
	// AdminUser is the user name of the admin credentials (group system:masters).
	AdminUser = "microlet-admin"
	// RootCAConfigMap is the ConfigMap EnsureNamespace creates, standing in
	// for kube-controller-manager's root-CA publisher; projected
	// service-account volumes reference it.
	RootCAConfigMap = "kube-root-ca.crt"
)

// Where Start puts the directories it owns, and the file naming the
// process that owns one.
const (
	tmpRoot   = "/tmp"
	tmpPrefix = "mlcp-"
	ownerFile = "owner.pid"
)

// sweepStaleDirs removes directories left by test binaries that died
// without running Stop (panic, SIGKILL, timeout). Their processes are
// already gone thanks to Pdeathsig; only the files remain. A directory is
// removed only when it names an owner that no longer exists.
func sweepStaleDirs() {
	if os.Getenv(EnvKeep) == "1" {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join(tmpRoot, tmpPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // being created right now, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// Options tune Start. The zero value is what most tests use: etcd and the
// apiserver only, everything on 127.0.0.1, free ports, a fresh directory
// under /tmp.
type Options struct {
	// Dir is the working directory (pki/, etcd/, logs/, kubeconfig/). Empty
	// means a new short directory under /tmp, removed by Stop.
	Dir string
	// BindAddress is the apiserver's --bind-address; 0.0.0.0 lets
	// containers reach a dev control plane. Default 127.0.0.1.
	BindAddress string
	// APIServerPort is the apiserver's --secure-port; 0 picks a free one.
	APIServerPort int
	// ExtraSANs are extra host names or IPs for the serving certificate,
	// e.g. the address containers use to reach a dev control plane.
	ExtraSANs []string
	// NodeTokens lists nodes that also get a static bearer token
	// (--token-auth-file), for clients that cannot present certificates.
	// Client certificates work for every node name without this.
	NodeTokens []string
	// StartTimeout bounds each wait for etcd and the apiserver. Default 3
	// minutes: eight agents share two cores here and CI is no faster.
	StartTimeout time.Duration
	// VerifyKubeletServingCerts makes the apiserver check nodes' serving
	// certificates against the control plane's CA
	// (--kubelet-certificate-authority); sign them with
	// PKI.KubeletServingCert. Off by default, as in kubeadm: a node's API
	// (nodeapi, the kubelet) serves a self-signed certificate unless given one.
	VerifyKubeletServingCerts bool
	// ExtraAPIServerArgs and ExtraEtcdArgs are appended to the processes'
	// flags (a later flag wins), e.g. --max-requests-inflight for a load
	// benchmark.
	ExtraAPIServerArgs []string
	ExtraEtcdArgs      []string
	// Scheduler and ControllerManager also run kube-scheduler and
	// kube-controller-manager (SchedulerFlags, ControllerManagerFlags) on
	// free loopback ports, each with its own client certificate, once the
	// apiserver is ready. Off by default: most tests need neither and
	// should not pay for them. StartScheduler and StartControllerManager
	// add them to a running control plane.
	Scheduler         bool
	ControllerManager bool
	// ExtraSchedulerArgs and ExtraControllerManagerArgs are appended to
	// those components' flags.
	ExtraSchedulerArgs         []string
	ExtraControllerManagerArgs []string
	// BootstrapTokenAuth lets nodes join with a bootstrap token, as after
	// kubeadm init: the apiserver runs with --enable-bootstrap-token-auth
	// and Start adds the RBAC of EnsureNodeBootstrap. Make a token with
	// CreateBootstrapToken and its kubeconfig with WriteBootstrapKubeconfig.
	BootstrapTokenAuth bool
	// ClusterSigningDuration is kube-controller-manager's
	// --cluster-signing-duration, the lifetime of the certificates it
	// signs (its signer makes certificates shorter than 8 hours valid from
	// 5 minutes before signing until now+duration); 0 keeps its default.
	ClusterSigningDuration time.Duration
}

// ControlPlane is a running etcd plus kube-apiserver, with kube-scheduler
// and kube-controller-manager when asked for. Its methods are safe for
// concurrent use by parallel tests.
type ControlPlane struct {
	opts    Options
	dir     string
	ownDir  bool
	pki     *PKI
	etcdBin string
	apiBin  string
	host    string // https://127.0.0.1:<port>

	etcdURL    string
	apiPort    int
	adminToken string
	nodeTokens map[string]string

	// compMu serialises the starts and stops of each component (by name).
	compMu map[string]*sync.Mutex

	mu      sync.Mutex
	etcd    *process
	api     *process
	comps   map[string]*process // running components by name
	admin   credential
	nodes   map[string]credential
	stopped bool
}

// credential is one client identity: a certificate or a bearer token.
type credential struct {
	certPEM, keyPEM []byte
	token           string
}

// Start launches etcd and kube-apiserver and returns once /readyz answers
// and the system namespaces exist, then the components opts asks for, once
// their /healthz answers. On error nothing is left running.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.BindAddress == "" {
		opts.BindAddress = "127.0.0.1"
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	cp := &ControlPlane{
		opts: opts, nodes: map[string]credential{}, nodeTokens: map[string]string{},
		comps:  map[string]*process{},
		compMu: map[string]*sync.Mutex{KubeScheduler: {}, KubeControllerManager: {}},
	}
	if cp.etcdBin, err = FindEtcd(); err != nil {
		return nil, err
	}
	if cp.apiBin, err = FindKubeAPIServer(); err != nil {
		return nil, err
	}
	components := componentsFromOptions(opts)
	if err := missingComponentBinaries(components); err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		sweepStaleDirs()
		// /tmp, not t.TempDir or $TMPDIR: paths stay short and obvious in ps.
		if cp.dir, err = os.MkdirTemp(tmpRoot, tmpPrefix+"*"); err != nil {
			return nil, err
		}
		cp.ownDir = true
		if err := os.WriteFile(filepath.Join(cp.dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return nil, err
		}
	} else {
		cp.dir = opts.Dir
	}
	defer func() {
		if err != nil {
			_ = cp.Stop()
		}
	}()
	for _, d := range []string{"logs", "etcd", "kubeconfig"} {
		if err := os.MkdirAll(filepath.Join(cp.dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	if cp.pki, err = NewPKI(filepath.Join(cp.dir, "pki"), opts.ExtraSANs); err != nil {
		return nil, fmt.Errorf("control-plane PKI: %w", err)
	}
	if err := cp.writeTokens(); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := cp.pki.ClientCert(AdminUser, "system:masters")
	if err != nil {
		return nil, err
	}
	cp.admin = credential{certPEM: certPEM, keyPEM: keyPEM}

	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx, opts.APIServerPort == 0); err != nil {
		return nil, err
	}
	if err := cp.bootstrap(ctx); err != nil {
		return nil, err
	}
	if err := cp.startComponents(ctx, components); err != nil {
		return nil, err
	}
	return cp, nil
}

// Dir is the control plane's working directory (pki/, logs/, kubeconfig/).
func (cp *ControlPlane) Dir() string { return cp.dir }

// Host is the apiserver's URL, https://127.0.0.1:<port>.
func (cp *ControlPlane) Host() string { return cp.host }

// PKI is the control plane's certificate authority, for signing further
// client credentials (see WriteKubeconfig).
func (cp *ControlPlane) PKI() *PKI { return cp.pki }

// EtcdPID and APIServerPID are the children's process IDs (0 when not
// running), for tests that prove nothing leaks.
func (cp *ControlPlane) EtcdPID() int { return cp.pidOf(func() *process { return cp.etcd }) }

// APIServerPID is the kube-apiserver's process ID, 0 when it is stopped.
func (cp *ControlPlane) APIServerPID() int { return cp.pidOf(func() *process { return cp.api }) }

func (cp *ControlPlane) pidOf(f func() *process) int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if p := f(); p != nil && !p.exited() {
		return p.pid()
	}
	return 0
}

// AdminConfig is a client config for a member of system:masters, which
// bypasses authorization: use it to set the scene, not to prove a node may
// do something.
func (cp *ControlPlane) AdminConfig() *rest.Config {
	return cp.restConfig(cp.admin)
}

// AdminToken is the static bearer token of the admin user.
func (cp *ControlPlane) AdminToken() string { return cp.adminToken }

// NodeConfig is a client config for system:node:<node> in system:nodes,
// signed on demand for any name, and therefore subject to the Node
// authorizer and NodeRestriction exactly like a kubelet.
func (cp *ControlPlane) NodeConfig(node string) *rest.Config {
	c, err := cp.nodeCredential(node)
	if err != nil {
		// Signing only fails on an empty name or a broken crypto/rand; a
		// config without credentials would fail later and less clearly.
		panic(fmt.Sprintf("controlplane: node credential for %q: %v", node, err))
	}
	return cp.restConfig(c)
}

// NodeToken is the static bearer token of node, if it was listed in
// Options.NodeTokens.
func (cp *ControlPlane) NodeToken(node string) (string, bool) {
	tok, ok := cp.nodeTokens[node]
	return tok, ok
}

// AdminKubeconfig writes (once) and returns the path of a kubeconfig for
// the admin user.
func (cp *ControlPlane) AdminKubeconfig() string {
	p := filepath.Join(cp.dir, "kubeconfig", "admin.kubeconfig")
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if _, err := os.Stat(p); err != nil {
		if err := WriteKubeconfig(p, cp.host, cp.pki.CACertPEM, AdminUser, cp.admin.certPEM, cp.admin.keyPEM, ""); err != nil {
			panic(fmt.Sprintf("controlplane: %v", err))
		}
	}
	return p
}

// NodeKubeconfig writes (once) and returns the path of a kubeconfig for
// system:node:<node>, what `microlet run --kubeconfig` takes.
func (cp *ControlPlane) NodeKubeconfig(node string) string {
	c, err := cp.nodeCredential(node)
	if err != nil {
		panic(fmt.Sprintf("controlplane: node credential for %q: %v", node, err))
	}
	p := filepath.Join(cp.dir, "kubeconfig", "node-"+node+".kubeconfig")
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if _, err := os.Stat(p); err != nil {
		if err := WriteKubeconfig(p, cp.host, cp.pki.CACertPEM, "system:node:"+node, c.certPEM, c.keyPEM, ""); err != nil {
			panic(fmt.Sprintf("controlplane: %v", err))
		}
	}
	return p
}

// KubectlCommand returns a command running the kubectl binary at kubectl
// (see FindKubectl, Kubectl) with args as the admin user: it starts with
// --kubeconfig=AdminKubeconfig() and a discovery cache inside Dir, and
// KUBERC=off, so nothing of the user's ~/.kube is read or written. A
// --kubeconfig in args comes later and wins, e.g. NodeKubeconfig(n) to act
// as a node.
func (cp *ControlPlane) KubectlCommand(ctx context.Context, kubectl string, args ...string) *exec.Cmd {
	full := append([]string{
		"--kubeconfig=" + cp.AdminKubeconfig(),
		"--cache-dir=" + filepath.Join(cp.dir, "kubectl-cache"),
	}, args...)
	cmd := exec.CommandContext(ctx, kubectl, full...)
	cmd.Env = append(os.Environ(), "KUBERC=off")
	return cmd
}

func (cp *ControlPlane) nodeCredential(node string) (credential, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if c, ok := cp.nodes[node]; ok {
		return c, nil
	}
	certPEM, keyPEM, err := cp.pki.NodeCert(node)
	if err != nil {
		return credential{}, err
	}
	c := credential{certPEM: certPEM, keyPEM: keyPEM}
	cp.nodes[node] = c
	return c, nil
}

func (cp *ControlPlane) restConfig(c credential) *rest.Config {
	return &rest.Config{
		Host:            cp.host,
		BearerToken:     c.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.pki.CACertPEM, CertData: c.certPEM, KeyData: c.keyPEM},
		// client-go's default 5 QPS makes tests slow for no benefit here.
		QPS:   100,
		Burst: 200,
	}
}

// EnsureNamespace creates ns with its "default" ServiceAccount and the
// kube-root-ca.crt ConfigMap, the objects kube-controller-manager adds and
// pods need for admission and token volumes, so a test need not wait for
// the controllers, or works without them (the default control plane runs
// none). Existing objects are left alone: with the controller manager
// running, whoever comes first creates them, with the same content.
func (cp *ControlPlane) EnsureNamespace(ctx context.Context, ns string) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	return ensureNamespace(ctx, cs, ns, cp.pki.CACertPEM)
}

func ensureNamespace(ctx context.Context, cs kubernetes.Interface, ns string, caPEM []byte) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create serviceaccount %s/default: %w", ns, err)
	}
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap},
		Data:       map[string]string{"ca.crt": string(caPEM)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create configmap %s/%s: %w", ns, RootCAConfigMap, err)
	}
	return nil
}

// StopAPIServer stops only the kube-apiserver; etcd and the data stay, so
// tests can prove clients ride out an apiserver outage.
func (cp *ControlPlane) StopAPIServer() error {
	cp.mu.Lock()
	api := cp.api
	cp.mu.Unlock()
	if api == nil {
		return nil
	}
	err := api.stop(stopGrace)
	cp.mu.Lock()
	cp.api = nil
	cp.mu.Unlock()
	return err
}

// StartAPIServer starts the kube-apiserver again on the same port against
// the same etcd, and returns once it is ready. It is a no-op while the
// apiserver runs.
func (cp *ControlPlane) StartAPIServer() error {
	cp.mu.Lock()
	running := cp.api != nil && !cp.api.exited()
	stopped := cp.stopped
	cp.mu.Unlock()
	if stopped {
		return errors.New("control plane already stopped")
	}
	if running {
		return nil
	}
	return cp.startAPIServer(context.Background(), false)
}

// Stop stops the components in reverse start order, kube-controller-manager
// and kube-scheduler, then the apiserver, then etcd (SIGTERM, then SIGKILL
// after a grace period), and removes the directory Start created unless
// MICROLET_KEEP_CONTROLPLANE=1. It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	cp.mu.Lock()
	if cp.stopped {
		cp.mu.Unlock()
		return nil
	}
	cp.stopped = true
	api, etcd := cp.api, cp.etcd
	kcm, sched := cp.comps[KubeControllerManager], cp.comps[KubeScheduler]
	cp.api, cp.etcd = nil, nil
	clear(cp.comps)
	cp.mu.Unlock()

	// Clients before servers: stopping the apiserver under the components,
	// or etcd under the apiserver, only makes them log and retry.
	errs := []error{kcm.stop(stopGrace), sched.stop(stopGrace), api.stop(stopGrace), etcd.stop(stopGrace)}
	if cp.ownDir && os.Getenv(EnvKeep) != "1" {
		errs = append(errs, os.RemoveAll(cp.dir))
	}
	return errors.Join(errs...)
}

func (cp *ControlPlane) writeTokens() error {
	var b strings.Builder
	cp.adminToken = randomToken()
	// Format: token,user,uid,"group1,group2".
	fmt.Fprintf(&b, "%s,%s,%s,\"system:masters\"\n", cp.adminToken, AdminUser, AdminUser)
	for _, n := range cp.opts.NodeTokens {
		tok := randomToken()
		cp.nodeTokens[n] = tok
		fmt.Fprintf(&b, "%s,system:node:%s,node-%s,\"system:nodes\"\n", tok, n, n)
	}
	return os.WriteFile(cp.pki.path("tokens.csv"), []byte(b.String()), 0o600)
}

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	// Ports are picked by binding and releasing them; another process can
	// take one in between, so a lost race is retried with new ports.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		client, err := freePort()
		if err != nil {
			return err
		}
		peer, err := freePort()
		if err != nil {
			return err
		}
		cp.etcdURL = "http://127.0.0.1:" + strconv.Itoa(client)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
		args := []string{
			"--name=microlet",
			"--data-dir=" + filepath.Join(cp.dir, "etcd"),
			"--listen-client-urls=" + cp.etcdURL,
			"--advertise-client-urls=" + cp.etcdURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=microlet=" + peerURL,
			"--initial-cluster-state=new",
			"--log-level=warn",
			"--logger=zap",
			// As kubeadm runs it: progress notifications let the
			// apiserver's watch cache learn it is current without an event.
			"--watch-progress-notify-interval=5s",
		}
		args = append(args, cp.opts.ExtraEtcdArgs...)
		p, err := startProcess("etcd", cp.etcdBin, args, filepath.Join(cp.dir, "logs", "etcd.log"))
		if err != nil {
			return err
		}
		cp.mu.Lock()
		cp.etcd = p
		cp.mu.Unlock()
		err = cp.waitFor(ctx, p, func(ctx context.Context) error {
			return httpOK(ctx, http.DefaultClient, cp.etcdURL+"/health")
		})
		if err == nil {
			return nil
		}
		lastErr = err
		_ = p.stop(stopGrace)
		if !p.addrInUse() {
			return err
		}
		_ = os.RemoveAll(filepath.Join(cp.dir, "etcd"))
	}
	return lastErr
}

func (cp *ControlPlane) startAPIServer(ctx context.Context, pickPort bool) error {
	attempts := 1
	if pickPort {
		attempts = 3
	}
	var lastErr error
	for attempt := 0; attempt < attempts; attempt++ {
		if pickPort {
			port, err := freePort()
			if err != nil {
				return err
			}
			cp.apiPort = port
		} else if cp.apiPort == 0 {
			cp.apiPort = cp.opts.APIServerPort
		}
		if pickPort || cp.host == "" {
			// Only set before the first start: a restart keeps the
			// port, and concurrent readers of Host must not race.
			cp.host = "https://127.0.0.1:" + strconv.Itoa(cp.apiPort)
		}
		p, err := startProcess("kube-apiserver", cp.apiBin, cp.apiServerArgs(), filepath.Join(cp.dir, "logs", "kube-apiserver.log"))
		if err != nil {
			return err
		}
		cp.mu.Lock()
		cp.api = p
		cp.mu.Unlock()
		err = cp.waitFor(ctx, p, cp.ready)
		if err == nil {
			return nil
		}
		lastErr = err
		_ = p.stop(stopGrace)
		cp.mu.Lock()
		cp.api = nil
		cp.mu.Unlock()
		if !p.addrInUse() {
			return err
		}
	}
	return lastErr
}

func (cp *ControlPlane) apiServerArgs() []string {
	pki := cp.pki
	args := []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=" + cp.opts.BindAddress,
		"--secure-port=" + strconv.Itoa(cp.apiPort),
		"--advertise-address=127.0.0.1",
		"--tls-cert-file=" + pki.path(servingCertFile),
		"--tls-private-key-file=" + pki.path(servingKeyFile),
		"--client-ca-file=" + pki.path(caCertFile),
		"--token-auth-file=" + pki.path("tokens.csv"),
		"--service-account-issuer=" + ServiceAccountIssuer,
		"--service-account-key-file=" + pki.path(saPubFile),
		"--service-account-signing-key-file=" + pki.path(saKeyFile),
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		// A single loopback apiserver has no endpoints worth reconciling;
		// the default reconciler logs errors about 127.0.0.1 forever.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		// On SIGTERM, drain ordinary requests (answering new ones with 429
		// and Retry-After) and then give open connections 2 s, instead of
		// waiting up to --request-timeout (60 s) for watches to end: the
		// scheduler's and controller manager's watches never end on their
		// own, so StopAPIServer took the full SIGKILL grace period.
		"--shutdown-send-retry-after=true",
	}
	args = append(args, KubeletClientFlags(pki.Dir, cp.opts.VerifyKubeletServingCerts)...)
	if cp.opts.BootstrapTokenAuth {
		args = append(args, "--enable-bootstrap-token-auth=true")
	}
	return append(args, cp.opts.ExtraAPIServerArgs...)
}

// ready is /readyz plus the namespaces the apiserver's own controllers
// create a moment later; tests touching kube-node-lease would flake without.
func (cp *ControlPlane) ready(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("readyz: %w: %s", err, body)
	}
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, corev1.NamespaceNodeLease} {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	return nil
}

func (cp *ControlPlane) bootstrap(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}
	if err := Bootstrap(ctx, cs, cp.pki.CACertPEM); err != nil {
		return err
	}
	if cp.opts.BootstrapTokenAuth {
		return EnsureNodeBootstrap(ctx, cs)
	}
	return nil
}

// Bootstrap adds to a fresh cluster what kube-controller-manager would for
// the default namespace (EnsureNamespace: its ServiceAccount and the
// kube-root-ca.crt ConfigMap with caPEM), so pods can be created there
// whether or not it runs, and what kubeadm would for nodes
// (EnsureKubeletAPIAccess, EnsureNodeCertificateRotation). Start runs it
// with the admin credentials; the compose dev box's bootstrap step too. It
// is idempotent.
func Bootstrap(ctx context.Context, cs kubernetes.Interface, caPEM []byte) error {
	if err := ensureNamespace(ctx, cs, metav1.NamespaceDefault, caPEM); err != nil {
		return err
	}
	if err := EnsureKubeletAPIAccess(ctx, cs); err != nil {
		return err
	}
	return EnsureNodeCertificateRotation(ctx, cs)
}

// waitFor polls check until it succeeds, p exits, or the start timeout.
func (cp *ControlPlane) waitFor(ctx context.Context, p *process, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, cp.opts.StartTimeout)
	defer cancel()
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if p.exited() {
			return false, errExited
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		last = check(cctx)
		return last == nil, nil
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errExited):
		return p.failure()
	default:
		return fmt.Errorf("%s not ready after %s (last error: %v); log %s:\n%s", p.name, cp.opts.StartTimeout, last, p.logPath, tail(p.logPath, 10))
	}
}

func httpOK(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
