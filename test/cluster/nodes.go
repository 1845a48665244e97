package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/test/cluster/addons"
)

// nodeSecurity are the docker run options of a node container. kind runs
// nodes --privileged; this machine's Docker cannot (its daemon lacks
// CAP_SYS_RESOURCE, and privileged asks for every capability), so a node
// gets every capability but that one, no seccomp or AppArmor profile,
// unmasked /proc and /sys, every device, and a cgroup namespace of its
// own. The entrypoint then remounts /sys and the cgroup hierarchies
// read-write (docs/cluster.md).
var nodeSecurity = []string{
	"--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
	"--security-opt", "systempaths=unconfined", "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
	"--device-cgroup-rule", "a *:* rwm", "--cgroupns", "private",
}

// preflightDocker fails within seconds, in one line, when Docker cannot
// run a cluster at all.
func preflightDocker(ctx context.Context) error {
	out, err := docker(ctx, "version", "-f", "{{.Server.APIVersion}}")
	if err != nil {
		return fmt.Errorf("docker: the engine does not answer: %w", err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(out, "%d.%d", &major, &minor); err != nil || major < 1 || major == 1 && minor < 41 {
		return fmt.Errorf("docker: engine API %q is too old: --cgroupns needs 1.41 (Docker 20.10) or newer", out)
	}
	return nil
}

// preflightNode starts the node image once with the node's options and
// checks that it can make /sys and the cgroups writable, which containerd
// and runc need.
func preflightNode(ctx context.Context) error {
	args := append([]string{"run", "--rm", "--entrypoint", "bash"}, nodeSecurity...)
	args = append(args, NodeImage, "-c", "mount -o remount,rw /sys && mount -o remount,rw /sys/fs/cgroup && test -w /sys/fs/cgroup")
	if _, err := docker(ctx, args...); err != nil {
		return fmt.Errorf("docker cannot give a node container what it needs (all capabilities but CAP_SYS_RESOURCE, systempaths=unconfined, a private cgroup namespace): %w", err)
	}
	return nil
}

// createNetwork creates the cluster's Docker network on the first /24 of
// 172.29.0.0/16 that neither another Docker network nor a route of this
// machine uses, without masquerading: nothing of the cluster talks to
// anything outside it.
func createNetwork(ctx context.Context, cfg Config) (string, error) {
	var used []netip.Prefix
	if ids, err := docker(ctx, "network", "ls", "-q"); err == nil && ids != "" {
		out, _ := docker(ctx, append([]string{"network", "inspect", "-f", "{{range .IPAM.Config}}{{.Subnet}} {{end}}"}, lines(ids)...)...)
		for _, s := range strings.Fields(out) {
			if p, err := netip.ParsePrefix(s); err == nil {
				used = append(used, p)
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "ip", "-4", "route", "show", "table", "all").Output(); err == nil {
		for _, l := range lines(string(out)) {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			if f[0] == "local" || f[0] == "broadcast" {
				f = f[1:]
			}
			if p, err := netip.ParsePrefix(f[0]); err == nil && p.Bits() > 0 {
				used = append(used, p)
			} else if a, err := netip.ParseAddr(f[0]); err == nil {
				used = append(used, netip.PrefixFrom(a, 32))
			}
		}
	}
	for i := 0; i < 256; i++ {
		cand := netip.MustParsePrefix(fmt.Sprintf("172.29.%d.0/24", i))
		if slices.ContainsFunc(used, cand.Overlaps) {
			continue
		}
		_, err := docker(ctx, "network", "create", "--driver", "bridge", "--subnet", cand.String(),
			"--label", LabelCluster+"="+cfg.Name, "-o", "com.docker.network.bridge.enable_ip_masquerade=false", cfg.network())
		if err != nil && strings.Contains(err.Error(), "overlaps") {
			// Another cluster (a test running beside this one) took
			// it between the listing and now: try the next.
			continue
		}
		if err != nil {
			return "", err
		}
		return cand.String(), nil
	}
	return "", errors.New("network: no free /24 in 172.29.0.0/16")
}

// controlPlaneBinary is one control-plane program on this machine: its
// path here, the path it is bind-mounted at (read-only) in the
// control-plane node, and the environment variable that points the node's
// control plane at it.
type controlPlaneBinary struct{ host, container, env string }

// controlPlaneBinaries finds each control-plane program (etcd,
// kube-apiserver, ...) on this machine.
func controlPlaneBinaries() ([]controlPlaneBinary, error) {
	var out []controlPlaneBinary
	for _, b := range []struct {
		name, env string
		find      func() (string, error)
	}{
		{"etcd", controlplane.EnvEtcd, controlplane.FindEtcd},
		{"kube-apiserver", controlplane.EnvKubeAPIServer, controlplane.FindKubeAPIServer},
		{"kube-scheduler", controlplane.EnvKubeScheduler, controlplane.FindKubeScheduler},
		{"kube-controller-manager", controlplane.EnvKubeControllerManager, controlplane.FindKubeControllerManager},
	} {
		p, err := b.find()
		if err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		out = append(out, controlPlaneBinary{host: p, container: "/opt/controlplane/" + b.name, env: b.env})
	}
	return out, nil
}

// runNode starts n's container: on the cluster network at n.IP, /var on a
// volume of its own (containerd's overlay snapshots cannot live on the
// container's own overlay), tmpfs /run and /tmp, the shared directory at
// /cluster (writable for the control plane, which writes the credentials
// there) and this machine's kernel modules read-only.
func (cl *Cluster) runNode(ctx context.Context, n Node, shared string, cpBins []controlPlaneBinary, agentBin string) error {
	label := LabelCluster + "=" + cl.Name
	vol := n.Name + "-var"
	if _, err := docker(ctx, "volume", "create", "--label", label, vol); err != nil {
		return err
	}
	args := []string{"run", "-d", "--name", n.Name, "--hostname", n.Name,
		"--network", cl.Network, "--ip", n.IP,
		"--label", label, "--label", LabelRole + "=" + n.Role, "--label", LabelAgent + "=" + cl.Agent,
		"--tmpfs", "/run", "--tmpfs", "/tmp", "-v", vol + ":/var",
		"-e", "MICROLET_NODE_IP=" + n.IP, "-e", "MICROLET_CLUSTER_ROLE=" + n.Role,
		"-e", "MICROLET_CLUSTER_REGISTRY=" + cl.RegistryHost(), "-e", "MICROLET_NODE_AGENT=" + cl.Agent,
	}
	if agentBin != "" {
		args = append(args, "-v", agentBin+":/usr/local/bin/"+cl.Agent+":ro")
	}
	args = append(args, nodeSecurity...)
	if _, err := os.Stat("/lib/modules"); err == nil {
		args = append(args, "-v", "/lib/modules:/lib/modules:ro")
	}
	if n.Role == RoleControlPlane {
		args = append(args, "-v", shared+":/cluster", "-p", fmt.Sprintf("127.0.0.1::%d", APIServerPort),
			"-e", "MICROLET_NODE_ARGS=--register-with-taints="+controlPlaneTaint)
		for _, b := range cpBins {
			args = append(args, "-v", b.host+":"+b.container+":ro", "-e", b.env+"="+b.container)
		}
	} else {
		args = append(args, "-v", shared+":/cluster:ro")
	}
	args = append(args, NodeImage)
	if _, err := docker(ctx, args...); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	fmt.Fprintf(cl.Log, "cluster %s: node %s started at %s\n", cl.Name, n.Name, n.IP)
	return nil
}

// waitFile waits for the control plane to write path, failing early with
// the node's last log lines when its container stops.
func (cl *Cluster) waitFile(ctx context.Context, n Node, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			return nil
		}
		if running, _ := docker(ctx, "inspect", "-f", "{{.State.Running}}", n.Name); running != "true" {
			return fmt.Errorf("node %s stopped before %s appeared: %s", n.Name, filepath.Base(path), cl.tail(ctx, n))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: no %s after %s (control plane log: docker exec %s cat /var/log/controlplane.log): %s",
				n.Name, filepath.Base(path), timeout, n.Name, cl.tail(ctx, n))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// tail is the last lines of a node's output and, on the control plane, of
// the control plane's log.
func (cl *Cluster) tail(ctx context.Context, n Node) string {
	var b bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", "logs", "--tail", "15", n.Name)
	cmd.Stdout, cmd.Stderr = &b, &b
	_ = cmd.Run()
	if n.Role == RoleControlPlane {
		out, _ := docker(ctx, "exec", n.Name, "tail", "-n", "15", "/var/log/controlplane.log")
		b.WriteString(out)
	}
	return strings.TrimSpace(b.String())
}

// writeKubeconfig writes the admin kubeconfig for this machine: the
// control plane's, with the server it publishes on 127.0.0.1.
func (cl *Cluster) writeKubeconfig(ctx context.Context, adminConf string) error {
	hostPort, err := docker(ctx, "port", cl.Nodes[0].Name, fmt.Sprintf("%d/tcp", APIServerPort))
	if err != nil {
		return err
	}
	hostPort = lines(hostPort)[0]
	kc, err := clientcmd.LoadFromFile(adminConf)
	if err != nil {
		return err
	}
	cl.APIServer = "https://" + hostPort
	for _, c := range kc.Clusters {
		c.Server = cl.APIServer
	}
	cl.Kubeconfig = cl.KubeconfigPath()
	return clientcmd.WriteToFile(*kc, cl.Kubeconfig)
}

// Client is an admin client of the cluster.
func (cl *Cluster) Client() (kubernetes.Interface, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cl.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// Kubectl runs kubectl v1.36.3 (hack/build-kubectl.sh) against the
// cluster and returns its combined output.
func (cl *Cluster) Kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	kubectl, err := controlplane.FindKubectl()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", cl.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// applyAddons applies the add-ons' manifests (test/cluster/addons) with the
// control plane's address.
func (cl *Cluster) applyAddons(ctx context.Context, v addons.Values) error {
	v.APIServerHost = cl.Nodes[0].IP
	yaml, err := addons.Render(v)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// The first apply can race the API server's own start-up
		// (namespaces, RBAC bootstrap): retry until it takes.
		_, err = cl.Kubectl(ctx, yaml, "apply", "-f", "-")
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(2 * time.Second)
	}
}

// addonWorkloads are what waitReady waits for, in kube-system.
var (
	addonDaemonSets  = []string{"podnet", "kube-proxy"}
	addonDeployments = []string{"coredns", "metrics-server"}
)

// waitReady waits until every node is Ready, labels the control-plane
// node with its role, and waits until every add-on is available. On
// timeout it names what is not ready and why.
func (cl *Cluster) waitReady(ctx context.Context, timeout time.Duration) error {
	cs, err := cl.Client()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	labelled := false
	for {
		problems := cl.problems(ctx, cs)
		if !labelled {
			if _, err := cl.Kubectl(ctx, nil, "label", "node", cl.Nodes[0].Name, "--overwrite", "node-role.kubernetes.io/control-plane="); err == nil {
				labelled = true
			}
		}
		if len(problems) == 0 && labelled {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster %s not ready after %s:\n  %s", cl.Name, timeout, strings.Join(problems, "\n  "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// problems lists what keeps the cluster from being ready, each with the
// reason the API shows.
func (cl *Cluster) problems(ctx context.Context, cs kubernetes.Interface) []string {
	var out []string
	for _, n := range cl.Nodes {
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			out = append(out, fmt.Sprintf("node %s: not registered (%v); its log: docker logs %s", n.Name, err, n.Name))
			continue
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				out = append(out, fmt.Sprintf("node %s: Ready=%s %s: %s", n.Name, c.Status, c.Reason, c.Message))
			}
		}
		if len(node.Spec.PodCIDRs) == 0 {
			out = append(out, fmt.Sprintf("node %s: no pod CIDR yet (kube-controller-manager's node IPAM)", n.Name))
		}
	}
	for _, name := range addonDaemonSets {
		ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("daemonset %s: %v", name, err))
		case ds.Status.DesiredNumberScheduled != int32(len(cl.Nodes)) || ds.Status.NumberReady != ds.Status.DesiredNumberScheduled:
			out = append(out, fmt.Sprintf("daemonset %s: %d of %d ready%s", name, ds.Status.NumberReady, len(cl.Nodes), podProblems(ctx, cs, ds.Spec.Selector)))
		}
	}
	for _, name := range addonDeployments {
		d, err := cs.AppsV1().Deployments("kube-system").Get(ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("deployment %s: %v", name, err))
		case !available(d):
			out = append(out, fmt.Sprintf("deployment %s: %d of %d available%s", name, d.Status.AvailableReplicas, ptrOr(d.Spec.Replicas, 1), podProblems(ctx, cs, d.Spec.Selector)))
		}
	}
	return out
}

func available(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.AvailableReplicas >= ptrOr(d.Spec.Replicas, 1)
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// podProblems names the selected pods that are not ready and why.
func podProblems(ctx context.Context, cs kubernetes.Interface, sel *metav1.LabelSelector) string {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return ""
	}
	pods, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return ""
	}
	var out []string
	for _, p := range pods.Items {
		why := string(p.Status.Phase)
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if w := c.State.Waiting; w != nil {
				why = fmt.Sprintf("%s: %s %s", c.Name, w.Reason, w.Message)
			} else if !c.Ready && c.State.Running != nil {
				why = c.Name + ": running, not ready"
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				why = "unscheduled: " + c.Message
			}
		}
		out = append(out, fmt.Sprintf("%s on %s (%s)", p.Name, p.Spec.NodeName, strings.TrimSpace(why)))
	}
	if len(out) == 0 {
		return ""
	}
	return "; pods: " + strings.Join(out, ", ")
}
