package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/kernelparams"
	"github.com/microlet/microlet/test/cluster/addons"
	"github.com/microlet/microlet/test/cluster/dockerimage"
)

// The cluster's address plan and names, as kubeadm's defaults.
const (
	PodCIDR       = "10.244.0.0/16"
	ServiceCIDR   = controlplane.ServiceClusterIPRange // 10.96.0.0/16
	ClusterDNS    = "10.96.0.10"
	ClusterDomain = "cluster.local"
	// APIServerPort is the API server's port on the cluster network.
	APIServerPort = 6443
	// RegistryPort is the cluster registry's port on the control-plane
	// node (Cluster.RegistryHost).
	RegistryPort = 5000
	// MaxWorkers bounds Config.Workers: two cores run the lot.
	MaxWorkers = 4
)

// Labels on everything a cluster makes in Docker: Down removes what
// carries LabelCluster=<name>.
const (
	LabelCluster = "io.microlet.cluster"
	LabelRole    = "io.microlet.cluster.role"
	// LabelAgent on a node container names its node agent (Config.Agent).
	LabelAgent = "io.microlet.cluster.agent"
)

// Node agents a cluster's nodes can run (Config.Agent).
const (
	AgentMicrolet = "microlet"
	// AgentKubelet is the upstream kubelet at the pinned version
	// (hack/build-kubelet.sh), from the same KubeletConfiguration file and
	// flags: the side column of the full conformance run.
	AgentKubelet = "kubelet"
)

// Roles of a node container.
const (
	RoleControlPlane = "control-plane"
	RoleWorker       = "worker"
)

// controlPlaneTaint keeps ordinary pods off the control-plane node, as
// kubeadm's; the add-ons that must run everywhere tolerate it.
const controlPlaneTaint = "node-role.kubernetes.io/control-plane=:NoSchedule"

// Config names a cluster and says how it is built.
type Config struct {
	// Name prefixes every container, the network and the volumes
	// (default "microlet": microlet-control-plane, microlet-worker, ...).
	Name string
	// Workers is the number of worker nodes, 1 to MaxWorkers (default 2),
	// besides the control-plane node.
	Workers int
	// RepoRoot is the repository the binaries are built from.
	RepoRoot string
	// Log receives progress (default os.Stderr).
	Log io.Writer
	// ReadyTimeout bounds the wait for Ready nodes and add-ons (default 8m).
	ReadyTimeout time.Duration
	// Agent is every node's node agent: AgentMicrolet (the default) or
	// AgentKubelet. The kubelet sets kernel parameters of the whole
	// machine when it starts (kernelparams.Kubelet); Up records them
	// first and Down puts them back.
	Agent string
}

// Node is one node container.
type Node struct {
	// Name is the container's name, its hostname and the Node's name.
	Name string
	// IP is its address on the cluster network, the Node's InternalIP.
	IP string
	// Role is RoleControlPlane or RoleWorker.
	Role string
}

// Cluster is a running cluster.
type Cluster struct {
	Config
	// Network is the Docker network the project created, Subnet its range.
	Network, Subnet string
	// Nodes are the control-plane node then the workers.
	Nodes []Node
	// Kubeconfig is the admin kubeconfig on this machine; its server is
	// APIServer, the control plane's port published on 127.0.0.1.
	Kubeconfig, APIServer string
}

// RegistryHost is host:port of the cluster registry: a plain-HTTP
// registry on the control-plane node, which every node's containerd asks
// first for registry.k8s.io's images. Nothing can be pulled from the
// internet here; an image pushed to it under registry.k8s.io's path (say
// e2e-test-images/kitten:1.8) is what a pod with pullPolicy Always gets.
// Its content lives in the control-plane node's memory.
func (cl *Cluster) RegistryHost() string {
	return fmt.Sprintf("%s:%d", cl.Nodes[0].IP, RegistryPort)
}

func (c *Config) setDefaults() error {
	if c.Name == "" {
		c.Name = "microlet"
	}
	if c.Workers == 0 {
		c.Workers = 2
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 8 * time.Minute
	}
	if c.Agent == "" {
		c.Agent = AgentMicrolet
	}
	var errs []error
	if c.Agent != AgentMicrolet && c.Agent != AgentKubelet {
		errs = append(errs, fmt.Errorf("agent: %q is not a node agent (%s or %s)", c.Agent, AgentMicrolet, AgentKubelet))
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		errs = append(errs, fmt.Errorf("workers: %d is out of range 1-%d", c.Workers, MaxWorkers))
	}
	if !validName(c.Name) {
		errs = append(errs, fmt.Errorf("name: %q must be lower-case letters, digits and '-', starting with a letter, at most 30 characters", c.Name))
	}
	if c.RepoRoot == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			errs = append(errs, fmt.Errorf("repo root: %w", err))
		}
		c.RepoRoot = root
	}
	return errors.Join(errs...)
}

func validName(s string) bool {
	if s == "" || len(s) > 30 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// stateDir holds the cluster's files on this machine: shared/ (mounted at
// /cluster in every node) and the admin kubeconfig.
func (c Config) stateDir() string { return filepath.Join(c.RepoRoot, "bin", "cluster", c.Name) }

// cacheDir holds saved images, shared by all clusters.
func (c Config) cacheDir() string {
	if d := os.Getenv("MICROLET_CACHE_DIR"); d != "" {
		return filepath.Join(d, "cluster")
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	return filepath.Join(base, "microlet", "cluster")
}

// KubeconfigPath is where Up writes the admin kubeconfig for this machine.
func (c Config) KubeconfigPath() string { return filepath.Join(c.stateDir(), "kubeconfig") }

func (c Config) network() string { return c.Name + "-net" }

func (c Config) nodeNames() []string {
	names := []string{c.Name + "-control-plane"}
	for i := 1; i <= c.Workers; i++ {
		n := c.Name + "-worker"
		if i > 1 {
			n += strconv.Itoa(i)
		}
		names = append(names, n)
	}
	return names
}

// Up builds what it needs (cached), then starts the control-plane node and
// the workers, waits until every Node is Ready and the add-ons run, and
// returns the cluster. A cluster of that name already running healthy with
// the same shape is reused; anything else of that name is removed first.
// When Up fails after creating something, it removes what it created.
func Up(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Log
	start := time.Now()
	if err := preflightDocker(ctx); err != nil {
		return nil, err
	}
	if cl, err := Existing(ctx, cfg); err == nil {
		if err := cl.waitReady(ctx, 30*time.Second); err == nil {
			fmt.Fprintf(log, "cluster %s: already up\n", cfg.Name)
			return cl, nil
		}
		fmt.Fprintf(log, "cluster %s: exists but is not healthy (%v); recreating\n", cfg.Name, err)
	}
	if err := Down(ctx, cfg); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.stateDir(), 0o755); err != nil {
		return nil, err
	}
	values := addons.Values{APIServerPort: APIServerPort, PodCIDR: PodCIDR, ServiceCIDR: ServiceCIDR, ClusterDNS: ClusterDNS, ClusterDomain: ClusterDomain}
	if err := buildNodeImage(ctx, cfg, values); err != nil {
		return nil, err
	}
	if err := preflightNode(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "cluster %s: images ready after %s\n", cfg.Name, time.Since(start).Round(time.Second))

	defer func() {
		if err != nil {
			fmt.Fprintf(log, "cluster %s: start failed; removing what was created (MICROLET_CLUSTER_KEEP=1 keeps it)\n", cfg.Name)
			if os.Getenv("MICROLET_CLUSTER_KEEP") == "" {
				_ = Down(context.WithoutCancel(ctx), cfg)
			}
		}
	}()
	cl := &Cluster{Config: cfg, Network: cfg.network()}
	if cl.Subnet, err = createNetwork(ctx, cfg); err != nil {
		return nil, err
	}
	prefix := netip.MustParsePrefix(cl.Subnet)
	ip := prefix.Addr().Next() // .1 is the gateway: this machine's side
	for i, name := range cfg.nodeNames() {
		ip = ip.Next()
		role := RoleWorker
		if i == 0 {
			role = RoleControlPlane
		}
		cl.Nodes = append(cl.Nodes, Node{Name: name, IP: ip.String(), Role: role})
	}
	shared := filepath.Join(cfg.stateDir(), "shared")
	if err := os.RemoveAll(shared); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(shared, 0o755); err != nil {
		return nil, err
	}
	cpBins, err := controlPlaneBinaries()
	if err != nil {
		return nil, err
	}
	var agentBin string
	if cfg.Agent == AgentKubelet {
		if agentBin, err = runScript(ctx, cfg.RepoRoot, log, "build-kubelet.sh"); err != nil {
			return nil, err
		}
		if err := recordKernelParams(cfg); err != nil {
			return nil, err
		}
	}
	if err := cl.runNode(ctx, cl.Nodes[0], shared, cpBins, agentBin); err != nil {
		return nil, err
	}
	if err := cl.waitFile(ctx, cl.Nodes[0], filepath.Join(shared, "admin.conf"), 4*time.Minute); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "cluster %s: control plane up after %s\n", cfg.Name, time.Since(start).Round(time.Second))
	for _, n := range cl.Nodes[1:] {
		if err := cl.runNode(ctx, n, shared, nil, agentBin); err != nil {
			return nil, err
		}
	}
	if err := cl.writeKubeconfig(ctx, filepath.Join(shared, "admin.conf")); err != nil {
		return nil, err
	}
	if err := cl.applyAddons(ctx, values); err != nil {
		return nil, err
	}
	if err := cl.waitReady(ctx, cfg.ReadyTimeout); err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "cluster %s: %d nodes Ready, add-ons running, after %s\n", cfg.Name, len(cl.Nodes), time.Since(start).Round(time.Second))
	return cl, nil
}

// buildNodeImage builds the node image's inputs and imports the image, one
// process at a time on this machine: two clusters coming up at once (the
// tests of two packages) would otherwise run make build into the same bin/
// together.
func buildNodeImage(ctx context.Context, cfg Config, values addons.Values) error {
	if err := os.MkdirAll(cfg.cacheDir(), 0o755); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(cfg.cacheDir(), ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	b, err := buildInputs(ctx, cfg, cfg.Log)
	if err != nil {
		return err
	}
	spec, err := nodeSpec(b, values)
	if err != nil {
		return err
	}
	_, err = dockerimage.Import(ctx, spec, cfg.Log)
	return err
}

// Existing finds a running cluster of cfg's name and shape.
func Existing(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	cl := &Cluster{Config: cfg, Network: cfg.network()}
	subnet, err := docker(ctx, "network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}}{{end}}", cl.Network)
	if err != nil {
		return nil, err
	}
	cl.Subnet = subnet
	for i, name := range cfg.nodeNames() {
		out, err := docker(ctx, "inspect", "-f", "{{.State.Running}} {{(index .NetworkSettings.Networks \""+cl.Network+"\").IPAddress}}", name)
		if err != nil {
			return nil, err
		}
		running, ip, _ := strings.Cut(out, " ")
		if running != "true" {
			return nil, fmt.Errorf("node %s is not running", name)
		}
		role := RoleWorker
		if i == 0 {
			role = RoleControlPlane
		}
		cl.Nodes = append(cl.Nodes, Node{Name: name, IP: ip, Role: role})
	}
	if agent, _ := docker(ctx, "inspect", "-f", "{{index .Config.Labels \""+LabelAgent+"\"}}", cl.Nodes[0].Name); agent != cfg.Agent {
		return nil, fmt.Errorf("cluster %s runs %q nodes, want %s", cfg.Name, agent, cfg.Agent)
	}
	if extra, _ := docker(ctx, "ps", "-q", "--filter", "label="+LabelCluster+"="+cfg.Name); len(lines(extra)) != len(cl.Nodes) {
		return nil, fmt.Errorf("cluster %s has %d node containers, want %d", cfg.Name, len(lines(extra)), len(cl.Nodes))
	}
	cl.Kubeconfig = cfg.KubeconfigPath()
	kc, err := clientcmd.LoadFromFile(cl.Kubeconfig)
	if err != nil {
		return nil, err
	}
	for _, c := range kc.Clusters {
		cl.APIServer = c.Server
	}
	return cl, nil
}

// Down removes every container, volume and network labelled with the
// cluster's name, and its files on this machine. It is safe to call for a
// cluster that does not exist.
func Down(ctx context.Context, cfg Config) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	filter := "label=" + LabelCluster + "=" + cfg.Name
	var errs []error
	// Containers first (they hold the volumes and the network), then
	// volumes, then the network: each listed by the label, then removed.
	for _, kind := range []struct{ list, remove []string }{
		{[]string{"ps", "-aq"}, []string{"rm", "-f", "-v"}},
		{[]string{"volume", "ls", "-q"}, []string{"volume", "rm", "-f"}},
		{[]string{"network", "ls", "-q"}, []string{"network", "rm"}},
	} {
		ids, err := docker(ctx, append(kind.list, "--filter", filter)...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ids := lines(ids); len(ids) > 0 {
			if _, err := docker(ctx, append(kind.remove, ids...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := restoreKernelParams(cfg); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(cfg.stateDir()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// kernelParamsFile holds the kernel parameters as they were before the
// first kubelet node started.
func (c Config) kernelParamsFile() string { return filepath.Join(c.stateDir(), "kernel-params-before") }

// recordKernelParams writes kernelparams.Kubelet's values to the cluster's
// state directory, unless an earlier Up of the same cluster already did
// (its nodes may have changed them since).
func recordKernelParams(cfg Config) error {
	if _, err := os.Stat(cfg.kernelParamsFile()); err == nil {
		return nil
	}
	v, err := kernelparams.Read(kernelparams.Kubelet)
	if err != nil {
		return err
	}
	return os.WriteFile(cfg.kernelParamsFile(), []byte(v.String()), 0o644)
}

// restoreKernelParams puts back what recordKernelParams recorded, once the
// nodes are gone.
func restoreKernelParams(cfg Config) error {
	b, err := os.ReadFile(cfg.kernelParamsFile())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	v, err := kernelparams.Parse(string(b))
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.kernelParamsFile(), err)
	}
	if d := kernelparams.Diff(v); d != "" {
		fmt.Fprintf(cfg.Log, "cluster %s: restoring kernel parameters the kubelet nodes changed: %s\n", cfg.Name, d)
	}
	return kernelparams.Write(v)
}

// Load copies images from this machine's Docker into every node's
// containerd (docker save, then ctr images import in each node), as
// `kind load docker-image` does.
func Load(ctx context.Context, cfg Config, images ...string) error {
	if err := cfg.setDefaults(); err != nil {
		return err
	}
	if len(images) == 0 {
		return errors.New("load: name at least one image")
	}
	nodes, err := docker(ctx, "ps", "--format", "{{.Names}}", "--filter", "label="+LabelCluster+"="+cfg.Name)
	if err != nil {
		return err
	}
	if len(lines(nodes)) == 0 {
		return fmt.Errorf("load: no running node of cluster %s (make cluster first)", cfg.Name)
	}
	dir, err := os.MkdirTemp("", "microlet-cluster-load-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	saved := filepath.Join(dir, "images.tar")
	if _, err := docker(ctx, append([]string{"save", "-o", saved}, images...)...); err != nil {
		return err
	}
	// Opened after the save: docker save writes a new file over the path.
	f, err := os.Open(saved)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, n := range lines(nodes) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "docker", "exec", "-i", n, "ctr", "-n", "k8s.io", "images", "import", "--all-platforms", "--digests", "-")
		cmd.Stdin = f
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("load into %s: %w: %s", n, err, strings.TrimSpace(string(out)))
		}
		fmt.Fprintf(cfg.Log, "loaded %s into %s\n", strings.Join(images, ", "), n)
	}
	return nil
}
