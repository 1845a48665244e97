package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Config is a node for Launch: what Start derives from the test and the
// package's control plane, given explicitly, so a program (the conformance
// harness) runs the very same node outside `go test`.
type Config struct {
	// Name is the node's name.
	Name string
	// Dir receives run/, data/, manifests/, logs/ and microlet.yaml.
	Dir string
	// Bins holds microlet and every service binary (Packages, built).
	Bins string
	// Kubeconfig is the node's credential (system:node:<Name>).
	Kubeconfig string
	// BootstrapKubeconfig, when set, is handed to `microlet run`, which then
	// requests the node's certificate and writes Kubeconfig itself.
	BootstrapKubeconfig string
	// ClientCAFile is the CA nodeapi trusts for client certificates: the
	// cluster's, so the API server's kubelet client certificate authenticates.
	ClientCAFile string
	// Instance labels the node's Docker objects (RemoveDockerObjects).
	Instance string
	// Args are extra flags per service, after ConnectedArgs'.
	Args map[string][]string
	// Out receives microlet's output (every service's log); nil discards it.
	Out io.Writer
	// KubeletConfig, when set, configures the node the kubelet's way: it is
	// written to kubelet-config.yaml and `microlet run` gets it with the
	// kubelet's flags (--kubeconfig, --hostname-override, --node-ip) instead
	// of ConnectedArgs; microlet.yaml (--microlet-config) then carries only
	// what a KubeletConfiguration has no field for (the Docker label, the
	// container log symlinks) and Args.
	KubeletConfig *kubeletv1beta1.KubeletConfiguration
	// PodLogsDir and LogSymlinkDir, when set, replace the node's own logs/
	// and containers/ dirs under Dir: the kubelet's /var/log/pods and
	// /var/log/containers for a suite that reads the logs there.
	PodLogsDir, LogSymlinkDir string
}

// RunDir, DataDir, ManifestDir and LogDir are the node's directories under Dir;
// LogDir is the pod log root (PodLogsDir when set).
func (c Config) RunDir() string      { return filepath.Join(c.Dir, "run") }
func (c Config) DataDir() string     { return filepath.Join(c.Dir, "data") }
func (c Config) ManifestDir() string { return filepath.Join(c.Dir, "manifests") }
func (c Config) LogDir() string {
	if c.PodLogsDir != "" {
		return c.PodLogsDir
	}
	return filepath.Join(c.Dir, "logs")
}

// SymlinkDir holds the container log symlinks: containers/ under Dir, or
// LogSymlinkDir when set.
func (c Config) SymlinkDir() string {
	if c.LogSymlinkDir != "" {
		return c.LogSymlinkDir
	}
	return filepath.Join(c.Dir, "containers")
}

// CgroupRoot is the cgroup root of the node with Docker label instance, so
// nodes sharing this host keep their pod cgroups apart.
func CgroupRoot(instance string) string { return "/microlet-" + instance }

// ConnectedArgs are the per-service flags of a node connected to a control
// plane on loopback: its own pod log root, cgroup root and Docker label, node IP
// 127.0.0.1 (the API server reaches the kubelet API at the InternalIP),
// nodeapi on a free loopback port (the Node advertises the real one) with
// the cluster CA as client CA; container log symlinks in its own dir,
// image GC off and only the memory eviction threshold.
func ConnectedArgs(c Config) map[string][]string {
	return map[string][]string{
		components.PodSyncd: {"--pod-logs-dir=" + c.LogDir(), "--container-log-symlink-dir=" + c.SymlinkDir(),
			// Docker's images are shared by every test on the machine:
			// image GC off, as the kubelet turns it off.
			"--image-gc-high-threshold-percent=100",
			// For the same reason no disk thresholds: the eviction
			// manager's reclaim removes every unused image under disk
			// pressure (as the conformance harness's kubelet is set up).
			"--eviction-hard=memory.available=100Mi",
			// Nodes sharing the host keep their pod cgroups apart.
			"--cgroup-root=" + CgroupRoot(c.Instance)},
		components.RuntimeShim: {"--docker-instance=" + c.Instance},
		components.NodeStatusd: {"--node-ip=127.0.0.1"},
		components.NodeAPI:     {"--address=127.0.0.1", "--port=0", "--client-ca-file=" + c.ClientCAFile, "--pod-logs-dir=" + c.LogDir()},
	}
}

// Packages are the import paths of microlet and every service binary a
// node runs; build them into one directory (Config.Bins).
func Packages() []string {
	pkgs := []string{"github.com/microlet/microlet/cmd/microlet"}
	for _, c := range components.All {
		pkgs = append(pkgs, "github.com/microlet/microlet/services/"+c.Name)
	}
	return pkgs
}

// Process is a running `microlet run` started by Launch.
type Process struct {
	Config
	cmd  *exec.Cmd
	done chan struct{}
}

// Launch creates the node's directories and config file and starts
// `microlet run` connected with ConnectedArgs plus c.Args, in its own
// process group, killed with its parent (Pdeathsig). It returns at once;
// WaitServing, WaitReady and WaitKubeletPort wait for the node.
func Launch(c Config) (*Process, error) {
	for _, d := range []string{c.RunDir(), c.ManifestDir(), c.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	args := ConnectedArgs(c)
	if c.KubeletConfig != nil {
		args = map[string][]string{
			components.RuntimeShim: {"--docker-instance=" + c.Instance},
			components.PodSyncd:    {"--container-log-symlink-dir=" + c.SymlinkDir()},
		}
	}
	for svc, extra := range c.Args {
		args[svc] = append(args[svc], extra...)
	}
	cfgPath := filepath.Join(c.Dir, "microlet.yaml")
	if err := os.WriteFile(cfgPath, []byte(argsYAML(args)), 0o600); err != nil {
		return nil, err
	}
	out := c.Out
	if out == nil {
		out = io.Discard
	}
	p := &Process{Config: c, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(c.Bins, "microlet"), "run", "--config", cfgPath,
		"--run-dir", c.RunDir(), "--data-dir", c.DataDir(), "--node-name", c.Name,
		"--kubeconfig", c.Kubeconfig, "--manifest-dir", c.ManifestDir(), "--bin-dir", c.Bins)
	if c.KubeletConfig != nil {
		data, err := yaml.Marshal(c.KubeletConfig)
		if err != nil {
			return nil, err
		}
		kcPath := filepath.Join(c.Dir, "kubelet-config.yaml")
		if err := os.WriteFile(kcPath, data, 0o600); err != nil {
			return nil, err
		}
		p.cmd = exec.Command(filepath.Join(c.Bins, "microlet"), "run", "--config", kcPath,
			"--microlet-config", cfgPath, "--kubeconfig", c.Kubeconfig,
			"--hostname-override", c.Name, "--node-ip", "127.0.0.1",
			"--run-dir", c.RunDir(), "--data-dir", c.DataDir(), "--bin-dir", c.Bins)
	}
	if c.BootstrapKubeconfig != "" {
		p.cmd.Args = append(p.cmd.Args, "--bootstrap-kubeconfig", c.BootstrapKubeconfig)
	}
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// PID is the process ID of `microlet run`.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when `microlet run` has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Stop sends SIGTERM (the supervisor stops its services in reverse order)
// and kills the whole process group when it has not exited after grace.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// WaitServing waits until podsyncd, the last service to start, serves.
func (p *Process) WaitServing(ctx context.Context) error {
	cc, err := grpcclient.Dial(components.Endpoint(p.RunDir(), components.PodSyncd))
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	return grpcclient.WaitServing(ctx, cc, "")
}

// WaitReady polls until the Node reports Ready; the error carries the
// last thing seen.
func WaitReady(ctx context.Context, admin kubernetes.Interface, name string) error {
	return poll(ctx, "node Ready", func() (bool, string) { return NodeReady(ctx, admin, name) })
}

// WaitKubeletPort polls until the Node advertises the port nodeapi really
// serves: the API server reaches the kubelet API there (logs, exec, ...).
// nodestatusd learns it on its first sync after nodeapi listens.
func WaitKubeletPort(ctx context.Context, admin kubernetes.Interface, runDir, name string) error {
	cc, err := grpcclient.Dial(components.Endpoint(runDir, components.NodeAPI))
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	api := nodeapiv1.NewNodeAPIServiceClient(cc)
	return poll(ctx, "the Node advertises nodeapi's port", func() (bool, string) { return kubeletPortAdvertised(ctx, api, admin, name) })
}

// NodeReady says whether Node name's Ready condition is True, and
// otherwise what stands in the way (the condition's message, or the error).
func NodeReady(ctx context.Context, admin kubernetes.Interface, name string) (bool, string) {
	node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue, c.Message
		}
	}
	return false, "no Ready condition"
}

func kubeletPortAdvertised(ctx context.Context, api nodeapiv1.NodeAPIServiceClient, admin kubernetes.Interface, name string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := api.GetServingInfo(ctx, &nodeapiv1.GetServingInfoRequest{})
	if err != nil {
		return false, err.Error()
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	got := node.Status.DaemonEndpoints.KubeletEndpoint.Port
	return got == info.GetPort(), fmt.Sprintf("Node has %d, nodeapi serves %d", got, info.GetPort())
}

// poll asks cond every 100 ms until it holds or ctx ends.
func poll(ctx context.Context, what string, cond func() (bool, string)) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		ok, msg := cond()
		last = msg
		return ok, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w (last: %s)", what, err, last)
	}
	return nil
}
