package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/kernelparams"
	"github.com/microlet/microlet/internal/testenv/node"
)

// KubeletNodeName is what NodeName says a kubelet-on-runtime-shim run's
// node ran ("kubelet on runtime-shim"), the report's second column.
const KubeletNodeName = "kubelet on runtime-shim"

// KubeletSysctls are the kernel parameters the upstream kubelet sets when
// it starts with protectKernelDefaults false (its container manager's
// kernel tunables); StartKubelet records them and Stop puts them back.
var KubeletSysctls = kernelparams.Kubelet

// KubeletOptions describe the upstream kubelet node of a
// kubelet-on-runtime-shim run: the same suite, the upstream kubelet as the
// node agent and microlet's runtime-shim, started alone, as its CRI
// runtime.
type KubeletOptions struct {
	// Kubelet is the upstream kubelet binary (hack/build-kubelet.sh).
	Kubelet string
	// Bins holds runtime-shim and pause (services/runtime-shim/pause),
	// which runtime-shim imports as its sandbox image.
	Bins string
	// Name is the node's name; default "kubelet-<random>".
	Name string
	// Dir is the node's directory; default a new /tmp/mlkubelet-* removed
	// by Stop.
	Dir string
	// NodeIP is the node's InternalIP and the address the kubelet API
	// listens on. Default: the address of the host's default-route
	// interface (the kubelet refuses loopback node IPs).
	NodeIP string
	// KubeletOut and ShimOut receive the two processes' output; nil
	// discards it.
	KubeletOut, ShimOut io.Writer
	// ShimArgs are extra runtime-shim flags (e.g. MirrorFlag).
	ShimArgs []string
}

// KubeletNode is a running upstream kubelet on runtime-shim.
type KubeletNode struct {
	// Name, NodeIP and Port are the Node's name, InternalIP and kubelet
	// API port.
	Name, NodeIP string
	Port         int
	// Dir holds the kubelet's root, certificate and pod log directories,
	// its configuration and runtime-shim's socket and state.
	Dir string
	// Instance labels runtime-shim's Docker objects.
	Instance string
	// CgroupRoot is the kubelet's cgroupRoot: its pods' cgroups live below
	// it, apart from any other node on the host.
	CgroupRoot string
	// Sysctls are the KubeletSysctls values before the kubelet started.
	Sysctls kernelparams.Values

	ownDir        bool
	kubelet, shim *child
	cgroupDirs    []string
}

// StartKubelet starts runtime-shim alone and the upstream kubelet as a
// node of cp with it as the CRI endpoint, and waits until the Node is
// Ready. The kubelet runs as the cluster's node identity
// (system:node:<name>, client certificate), authenticates its API's
// clients with the cluster CA and webhook token review, authorizes them
// with webhook subject access review, uses Docker's cgroup driver (the
// shim reports it) below a cgroup root of its own, has no static pods, no
// image garbage collection and no disk-pressure eviction (Docker's images
// are shared with whatever else runs here). The KubeletSysctls values are
// recorded first; Stop restores them.
func StartKubelet(ctx context.Context, cp *controlplane.ControlPlane, opts KubeletOptions) (_ *KubeletNode, err error) {
	if opts.Kubelet == "" {
		return nil, errors.New("no kubelet binary (hack/build-kubelet.sh)")
	}
	if opts.Name == "" {
		opts.Name = "kubelet-" + rand.String(5)
	}
	k := &KubeletNode{Name: opts.Name, Instance: "conformance-kubelet-" + rand.String(8)}
	k.CgroupRoot = "/" + k.Instance
	if k.NodeIP = opts.NodeIP; k.NodeIP == "" {
		ip, err := utilnet.ChooseHostInterface()
		if err != nil {
			return nil, fmt.Errorf("node IP: %w", err)
		}
		k.NodeIP = ip.String()
	}
	if k.Dir = opts.Dir; k.Dir == "" {
		if k.Dir, err = os.MkdirTemp("/tmp", "mlkubelet-"); err != nil {
			return nil, err
		}
		k.ownDir = true
	}
	defer func() {
		if err != nil {
			k.Stop()
		}
	}()
	dirs := map[string]string{}
	for _, d := range []string{"root", "certs", "logs", "shim", "shim-data", "volume-plugins"} {
		dirs[d] = filepath.Join(k.Dir, d)
		if err := os.MkdirAll(dirs[d], 0o755); err != nil {
			return nil, err
		}
	}

	// runtime-shim alone, on a socket of its own.
	socket := filepath.Join(dirs["shim"], "runtime.sock")
	k.shim, err = startChild(filepath.Join(opts.Bins, "runtime-shim"), opts.ShimOut, append([]string{
		"--socket=" + socket, "--run-dir=" + dirs["shim"], "--data-dir=" + dirs["shim-data"], "--docker-instance=" + k.Instance},
		opts.ShimArgs...)...)
	if err != nil {
		return nil, err
	}
	if err := waitShim(ctx, socket, k.shim); err != nil {
		return nil, err
	}

	if k.cgroupDirs, err = makeCgroupRoot(k.CgroupRoot); err != nil {
		return nil, err
	}
	if k.Sysctls, err = kernelparams.Read(KubeletSysctls); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(k.Dir, "sysctls-before"), []byte(k.Sysctls.String()), 0o644); err != nil {
		return nil, err
	}

	if k.Port, err = freePort(k.NodeIP); err != nil {
		return nil, err
	}
	cfg := KubeletConfig(KubeletConfigInput{
		Address: k.NodeIP, Port: k.Port, ClientCAFile: filepath.Join(cp.PKI().Dir, "ca.crt"),
		RuntimeEndpoint: "unix://" + socket, CgroupRoot: k.CgroupRoot, CgroupDriver: dockerCgroupDriver(),
		PodLogsDir: dirs["logs"], VolumePluginDir: dirs["volume-plugins"],
	})
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(k.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		return nil, err
	}
	k.kubelet, err = startChild(opts.Kubelet, opts.KubeletOut,
		"--config="+cfgPath, "--kubeconfig="+cp.NodeKubeconfig(k.Name), "--root-dir="+dirs["root"],
		"--cert-dir="+dirs["certs"], "--hostname-override="+k.Name, "--node-ip="+k.NodeIP, "--v=2")
	if err != nil {
		return nil, err
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-k.kubelet.exited:
			cancel()
		case <-wctx.Done():
		}
	}()
	if err := node.WaitReady(wctx, admin, k.Name); err != nil {
		if k.kubelet.done() {
			return nil, fmt.Errorf("kubelet exited before its node was Ready: %v", k.kubelet.err)
		}
		return nil, fmt.Errorf("node %s: %w", k.Name, err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, k.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if got := int(n.Status.DaemonEndpoints.KubeletEndpoint.Port); got != k.Port {
		return nil, fmt.Errorf("node %s advertises kubelet port %d, want %d", k.Name, got, k.Port)
	}
	return k, nil
}

// KubeletConfigInput are the parts of the kubelet's configuration that
// depend on the run.
type KubeletConfigInput struct {
	// Address and Port are where the kubelet API listens; ReadOnlyPort,
	// when not 0, is the read-only port's (plain HTTP, same address).
	Address            string
	Port, ReadOnlyPort int
	// ClientCAFile authenticates the API server's kubelet client certificate.
	ClientCAFile string
	// RuntimeEndpoint is runtime-shim's socket (unix://...).
	RuntimeEndpoint string
	// CgroupRoot and CgroupDriver place the pods' cgroups.
	CgroupRoot, CgroupDriver string
	// PodLogsDir and VolumePluginDir replace /var/log/pods and the
	// host-wide flexvolume directory.
	PodLogsDir, VolumePluginDir string
	// StaticPodPath, when set, is a directory of static pod manifests (the
	// e2e_node suite's mirror-pod specs write there); ClusterDomain, when
	// set, the pods' DNS domain (its FQDN specs compare with it).
	StaticPodPath, ClusterDomain string
}

// KubeletConfig is the kubelet's configuration file for a conformance
// node: upstream's defaults except where this host and its sharing with
// other work need otherwise (each setting says why).
func KubeletConfig(in KubeletConfigInput) *kubeletv1beta1.KubeletConfiguration {
	return &kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},
		// The kubelet API only on the node IP; no read-only port unless
		// the run asks for one; no healthz port.
		Address:      in.Address,
		Port:         int32(in.Port),
		ReadOnlyPort: int32(in.ReadOnlyPort),
		HealthzPort:  ptr.To[int32](0),
		// As the microlet node: client certificates signed by the cluster
		// CA and bearer tokens (TokenReview) authenticate, SubjectAccessReview
		// authorizes, anonymous requests are refused.
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: in.ClientCAFile},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		// CRI: runtime-shim, nothing else.
		ContainerRuntimeEndpoint: in.RuntimeEndpoint,
		// Docker's driver (runtime-shim reports it too); pods below a root
		// of this node's own, apart from any other node on the host.
		CgroupDriver: in.CgroupDriver,
		CgroupRoot:   in.CgroupRoot,
		// The hosts this runs on are cgroup v1; the kubelet refuses them
		// unless told otherwise since v1.35.
		FailCgroupV1: ptr.To(false),
		// No static pods, unless the run writes some.
		StaticPodPath: in.StaticPodPath,
		ClusterDomain: in.ClusterDomain,
		// Pod logs and flexvolume plugins in the node's directory.
		PodLogsDir:      in.PodLogsDir,
		VolumePluginDir: in.VolumePluginDir,
		// Docker's images are shared with everything else on the host:
		// image garbage collection (at 100 % disk use, never) and
		// disk-pressure eviction (only memory.available is given, so the
		// other signals are 0, off) must not delete them.
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		EvictionHard:                map[string]string{"memory.available": "100Mi"},
		// The kubelet sets its kernel tunables (KubeletSysctls), as on any
		// node; the harness restores them afterwards.
		ProtectKernelDefaults: false,
		// No cluster DNS here (as for microlet): pods get the host's resolver.
		ClusterDNS: nil,
	}
}

// Stop stops the kubelet, removes runtime-shim's containers, stops the
// shim, restores the kernel parameters the kubelet changed, unmounts what
// the kubelet left mounted under Dir, removes the cgroup root and, when
// StartKubelet made it, Dir.
func (k *KubeletNode) Stop() {
	if k.kubelet != nil {
		k.kubelet.stop(60 * time.Second)
	}
	node.RemoveDockerObjects(k.Instance)
	if k.shim != nil {
		k.shim.stop(30 * time.Second)
	}
	if k.Sysctls != nil {
		if err := kernelparams.Write(k.Sysctls); err != nil {
			fmt.Fprintf(os.Stderr, "conformance: restoring kernel parameters %s: %v\n", k.Sysctls, err)
		}
	}
	if k.Dir != "" {
		unmountUnder(k.Dir)
	}
	removeCgroupDirs(k.cgroupDirs)
	if k.ownDir && k.Dir != "" {
		_ = os.RemoveAll(k.Dir)
	}
}

// KubeletPID and ShimPID are the process IDs of the kubelet and of
// runtime-shim (0 when not running), for measuring each apart.
func (k *KubeletNode) KubeletPID() int { return k.kubelet.pid() }
func (k *KubeletNode) ShimPID() int    { return k.shim.pid() }

// RecordedSysctls are Sysctls as sysctl(8) lines (kernel.panic=1).
func (k *KubeletNode) RecordedSysctls() string { return k.Sysctls.String() }

// RestoreReport says which recorded kernel parameters differ from now;
// empty when all are as recorded.
func (k *KubeletNode) RestoreReport() string { return kernelparams.Diff(k.Sysctls) }

// dockerCgroupDriver is Docker's cgroup driver (docker info), cgroupfs if
// it cannot be asked.
func dockerCgroupDriver() string {
	out, err := exec.Command("docker", "info", "--format", "{{.CgroupDriver}}").Output()
	if d := strings.TrimSpace(string(out)); err == nil && d == "systemd" {
		return d
	}
	return "cgroupfs"
}

// freePort returns a TCP port free on ip at the time of asking.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// cgroupMounts are the mount points of the host's cgroup file systems (v1
// hierarchies, or the one v2 tree).
func cgroupMounts() ([]string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return nil, err
	}
	var out []string
	v2 := ""
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup":
			out = append(out, m.Mountpoint)
		case "cgroup2":
			v2 = m.Mountpoint
		}
	}
	if len(out) == 0 && v2 != "" {
		out = append(out, v2)
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup file system mounted")
	}
	return out, nil
}

// makeCgroupRoot creates root in every cgroup hierarchy (the kubelet
// requires its cgroupRoot to exist), with the parent's CPUs and memory
// nodes in the cpuset hierarchy. It returns the directories it made.
func makeCgroupRoot(root string) ([]string, error) {
	points, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	var made []string
	for _, p := range points {
		d := filepath.Join(p, root)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			removeCgroupDirs(made)
			return nil, fmt.Errorf("cgroup root: %w", err)
		}
		made = append(made, d)
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), b, 0o644); err != nil {
					removeCgroupDirs(made)
					return nil, fmt.Errorf("cgroup root %s: %w", f, err)
				}
			}
		}
	}
	return made, nil
}

// removeCgroupDirs removes each directory and the cgroups below it,
// deepest first (a cgroup is removed with rmdir once it has no process).
func removeCgroupDirs(dirs []string) {
	for _, d := range dirs {
		var all []string
		_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			if err := syscall.Rmdir(all[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
				fmt.Fprintf(os.Stderr, "conformance: remove cgroup %s: %v\n", all[i], err)
			}
		}
	}
}

// unmountUnder detaches every mount below dir (the kubelet's tmpfs
// volumes of pods it did not clean up), deepest first, so removing dir
// cannot reach into them.
func unmountUnder(dir string) {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return
	}
	var points []string
	for _, m := range mounts {
		if m.Mountpoint != dir {
			points = append(points, m.Mountpoint)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			fmt.Fprintf(os.Stderr, "conformance: unmount %s: %v\n", p, err)
		}
	}
}

// child is a process StartKubelet started, in its own process group,
// killed with the harness (Pdeathsig).
type child struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func startChild(bin string, out io.Writer, args ...string) (*child, error) {
	if out == nil {
		out = io.Discard
	}
	c := &child{cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { c.err = c.cmd.Wait(); close(c.exited) }()
	return c, nil
}

// pid is the process ID, 0 when c is nil or has exited.
func (c *child) pid() int {
	if c == nil || c.done() {
		return 0
	}
	return c.cmd.Process.Pid
}

func (c *child) done() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then kills the process group after grace.
func (c *child) stop(grace time.Duration) {
	if c.done() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}

// waitShim waits until runtime-shim serves on socket, or fails when it
// exits first.
func waitShim(ctx context.Context, socket string, shim *child) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() {
		select {
		case <-shim.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	cc, err := grpcclient.Dial("unix://" + socket)
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	if err := grpcclient.WaitServing(ctx, cc, ""); err != nil {
		if shim.done() {
			return fmt.Errorf("runtime-shim exited: %v", shim.err)
		}
		return fmt.Errorf("runtime-shim not serving on %s: %w", socket, err)
	}
	return nil
}
