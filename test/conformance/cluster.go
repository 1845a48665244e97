package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
)

// NodeOptions describe the one microlet node of the suite's cluster.
type NodeOptions struct {
	// Bins holds microlet and every service binary (node.Packages), and
	// pause (services/runtime-shim/pause) for the sandbox image.
	Bins string
	// Name is the node's name; default "microlet-<random>".
	Name string
	// Dir is the node's directory; default a new /tmp/mlconf-* removed by Stop.
	Dir string
	// Args are extra flags per service, after node.ConnectedArgs'.
	Args map[string][]string
	// Out receives microlet's output; nil discards it.
	Out io.Writer
	// StaticPods makes the node's manifest directory (node.Config's
	// ManifestDir) its staticPodPath; ClusterDomain, when set, is its
	// clusterDomain. The e2e_node suite needs both.
	StaticPods    bool
	ClusterDomain string
	// CgroupRoot replaces the node's own cgroup root (node.CgroupRoot):
	// the e2e_node suite looks for the pods' cgroups under "/" (kubepods,
	// kubepods/burstable, ...), where its kubelet puts them.
	CgroupRoot string
	// Port is the kubelet API's port; default a free one. The e2e_node
	// suite reads /configz at 127.0.0.1:10250, the kubelet's port.
	Port int
	// ReadOnlyPort is the kubelet's read-only port; 0 (the default, as
	// the kubelet's) serves none. The e2e_node suite reads /stats/summary
	// and /metrics/cadvisor there, as its own kubelet serves them on
	// KubeletReadOnlyPort.
	ReadOnlyPort int
	// KubeletLogDirs puts the pods' logs and the container log symlinks in
	// the kubelet's directories (KubeletPodLogsDir, KubeletLogSymlinkDir)
	// instead of the node's own: specs of the e2e_node suite read them
	// there. Stop removes what the node's pods left in them.
	KubeletLogDirs bool
}

// Node is the running node: its process and what Stop removes.
type Node struct {
	*node.Process
	ownDir bool
	// pods records the node's pods when their logs go to the kubelet's
	// shared directories; nil otherwise.
	pods *podUIDs
}

// StartNode launches a microlet node connected to cp as the suite needs it
// and waits until it serves, is Ready and advertises nodeapi's port. The
// node runs from the same KubeletConfiguration the upstream kubelet's
// column gets (KubeletConfig: the kubelet API on loopback with the cluster
// CA as client CA, no image GC or disk-pressure eviction, pods' cgroups
// under a root of its own, the kubelet's defaults everywhere else; no
// cluster DNS, so ClusterFirst pods get the host's resolver), with its own
// runtime-shim as the CRI endpoint, node IP 127.0.0.1, and the kubelet
// flags --kubeconfig, --hostname-override and --node-ip, as an operator
// swapping the kubelet for microlet would pass them.
func StartNode(ctx context.Context, cp *controlplane.ControlPlane, opts NodeOptions) (_ *Node, err error) {
	if opts.Name == "" {
		opts.Name = "microlet-" + rand.String(5)
	}
	n := &Node{}
	if opts.Dir == "" {
		if opts.Dir, err = os.MkdirTemp("/tmp", "mlconf-"); err != nil {
			return nil, err
		}
		n.ownDir = true
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, err
	}
	cfg := node.Config{
		Name: opts.Name, Dir: opts.Dir, Bins: opts.Bins, Kubeconfig: cp.NodeKubeconfig(opts.Name),
		ClientCAFile: filepath.Join(cp.PKI().Dir, "ca.crt"), Instance: "conformance-" + rand.String(8),
		Args: opts.Args, Out: opts.Out,
	}
	if opts.KubeletLogDirs {
		cfg.PodLogsDir, cfg.LogSymlinkDir = KubeletPodLogsDir, KubeletLogSymlinkDir
		if n.pods, err = recordPodUIDs(ctx, admin, opts.Name, KubeletPodLogsDir, KubeletLogSymlinkDir); err != nil {
			return nil, err
		}
	}
	port := opts.Port
	if port == 0 {
		if port, err = freePort("127.0.0.1"); err != nil {
			return nil, err
		}
	}
	cfg.KubeletConfig = KubeletConfig(KubeletConfigInput{
		Address: "127.0.0.1", Port: port, ReadOnlyPort: opts.ReadOnlyPort, ClientCAFile: cfg.ClientCAFile,
		RuntimeEndpoint: components.Endpoint(cfg.RunDir(), components.RuntimeShim),
		CgroupRoot:      node.CgroupRoot(cfg.Instance), CgroupDriver: dockerCgroupDriver(),
		PodLogsDir: cfg.LogDir(), VolumePluginDir: filepath.Join(opts.Dir, "volume-plugins"),
		ClusterDomain: opts.ClusterDomain,
	})
	if opts.StaticPods {
		cfg.KubeletConfig.StaticPodPath = cfg.ManifestDir()
	}
	if opts.CgroupRoot != "" {
		cfg.KubeletConfig.CgroupRoot = opts.CgroupRoot
	}
	if n.Process, err = node.Launch(cfg); err != nil {
		if n.pods != nil {
			_ = n.pods.removeLogs(cfg.LogDir(), cfg.SymlinkDir())
		}
		return nil, err
	}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := n.WaitServing(wctx); err != nil {
		return nil, fmt.Errorf("node %s: podsyncd never served: %w", opts.Name, err)
	}
	if err := node.WaitReady(wctx, admin, opts.Name); err != nil {
		return nil, fmt.Errorf("node %s: %w", opts.Name, err)
	}
	if err := node.WaitKubeletPort(wctx, admin, n.RunDir(), opts.Name); err != nil {
		return nil, fmt.Errorf("node %s: %w", opts.Name, err)
	}
	return n, nil
}

// Stop stops microlet, removes the Docker containers it left, the logs
// its pods left in the kubelet's directories (KubeletLogDirs) and, when
// StartNode made it, the node's directory (the mounts below it first: the
// tmpfs and shared volume dirs of pods still there).
func (n *Node) Stop() {
	n.Process.Stop(60 * time.Second)
	node.RemoveDockerObjects(n.Instance)
	if n.pods != nil {
		if err := n.pods.removeLogs(n.LogDir(), n.SymlinkDir()); err != nil {
			fmt.Fprintf(os.Stderr, "conformance: remove the node's pod logs: %v\n", err)
		}
	}
	if n.ownDir {
		unmountUnder(n.Dir)
		_ = os.RemoveAll(n.Dir)
	}
}
