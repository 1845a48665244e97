package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
)

// instance is what the provider says about one Node.
type instance struct {
	ip       string
	shutdown bool
	gone     bool
}

// cloudFile renders the provider's file for the instances: the static
// provider's cluster form, or the example plug-in's file, which differ only
// in how a vanished instance is written (left out, or gone: true).
func cloudFile(plugin bool, nodes map[string]instance) string {
	var b strings.Builder
	if plugin {
		b.WriteString("name: e2e\n")
	}
	b.WriteString("nodes:\n")
	for name, in := range nodes {
		if in.gone && !plugin {
			continue
		}
		fmt.Fprintf(&b, "  %s:\n    provider_id: e2e://lab/%s\n    instance_type: m1.metal\n    zone: rack1\n    region: dc1\n", name, name)
		fmt.Fprintf(&b, "    shutdown: %v\n    labels: {example.com/pool: gpu}\n    addresses:\n    - {type: InternalIP, address: %s}\n    - {type: Hostname, address: %s}\n", in.shutdown, in.ip, name)
		if plugin && in.gone {
			b.WriteString("    gone: true\n")
		}
	}
	return b.String()
}

// TestNodeInitialisationAndLifecycle runs upstream's CloudNodeController and
// CloudNodeLifecycleController in cloudsyncd against the static provider and
// the external plug-in example: a new Node is initialised (taint removed,
// providerID, labels, addresses), its addresses follow the cloud, the
// shutdown taint follows the instance's state, and the Node is deleted when
// its instance no longer exists.
func TestNodeInitialisationAndLifecycle(t *testing.T) {
	for _, plugin := range []bool{false, true} {
		name := "static"
		if plugin {
			name = "external"
		}
		t.Run(name, func(t *testing.T) { nodeLifecycle(t, name, plugin) })
	}
}

func nodeLifecycle(t *testing.T, provider string, plugin bool) {
	cp := controlplane.Get(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	kc := rbacKubeconfig(t, cp)
	dir := testenv.ShortDir(t, "csn")
	file := filepath.Join(dir, "cloud.yaml")
	node, other := "e2e-"+provider+"-a", "e2e-"+provider+"-b"
	nodes := map[string]instance{node: {ip: "10.20.0.1"}, other: {ip: "10.20.0.2"}}
	writeFile(t, file, cloudFile(plugin, nodes))

	args := controllerArgs(kc, "e2e-nodes-"+provider, "node,node-lifecycle")
	if plugin {
		sock := filepath.Join(dir, "cp.sock")
		run(t, "plugin", bin(t, pluginPkg), "--socket", sock, "--config", file)
		args = append(args, "--cloud-provider", "external", "--external-endpoint", "unix://"+sock)
	} else {
		args = append(args, "--cloud-provider", "static", "--static-file", file)
	}
	createNode(t, admin, node, true, false)
	createNode(t, admin, other, true, true)
	cloudsyncd(t, "cloudsyncd-"+provider, args...)

	eventually(t, "node initialised", func() error {
		n, err := getNode(t, admin, node)
		if err != nil {
			return err
		}
		if hasTaint(n, uninitialized) {
			return errors.New("still has the uninitialized taint")
		}
		want := map[string]string{
			"node.kubernetes.io/instance-type":         "m1.metal",
			"beta.kubernetes.io/instance-type":         "m1.metal",
			"topology.kubernetes.io/zone":              "rack1",
			"failure-domain.beta.kubernetes.io/zone":   "rack1",
			"topology.kubernetes.io/region":            "dc1",
			"failure-domain.beta.kubernetes.io/region": "dc1",
			"example.com/pool":                         "gpu",
		}
		for k, v := range want {
			if n.Labels[k] != v {
				return fmt.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
			}
		}
		if n.Spec.ProviderID != "e2e://lab/"+node {
			return fmt.Errorf("providerID %q", n.Spec.ProviderID)
		}
		if a := n.Status.Addresses; len(a) != 2 || a[0].Address != "10.20.0.1" || a[1].Address != node {
			return fmt.Errorf("addresses %v", a)
		}
		return nil
	})
	eventually(t, "second node initialised", func() error {
		n, err := getNode(t, admin, other)
		if err != nil {
			return err
		}
		if hasTaint(n, uninitialized) || n.Spec.ProviderID != "e2e://lab/"+other {
			return fmt.Errorf("taints %v providerID %q", n.Spec.Taints, n.Spec.ProviderID)
		}
		return nil
	})

	// The periodic update (node_status_update_frequency) follows the cloud.
	nodes[node] = instance{ip: "10.20.0.9"}
	writeFile(t, file, cloudFile(plugin, nodes))
	eventually(t, "addresses updated", func() error {
		n, err := getNode(t, admin, node)
		if err != nil {
			return err
		}
		if a := n.Status.Addresses; len(a) == 0 || a[0].Address != "10.20.0.9" {
			return fmt.Errorf("addresses %v", a)
		}
		return nil
	})

	// Lifecycle: a not-ready Node whose instance is shut down gets the
	// taint.
	nodes[node] = instance{ip: "10.20.0.9", shutdown: true}
	writeFile(t, file, cloudFile(plugin, nodes))
	eventually(t, "shutdown taint added", func() error {
		n, err := getNode(t, admin, node)
		if err != nil {
			return err
		}
		if !hasTaint(n, shutdownTaint) {
			return fmt.Errorf("taints %v", n.Spec.Taints)
		}
		return nil
	})
	// Upstream removes the taint once the Node is Ready again.
	nodes[node] = instance{ip: "10.20.0.9"}
	writeFile(t, file, cloudFile(plugin, nodes))
	setReady(t, admin, node, true)
	eventually(t, "shutdown taint removed", func() error {
		n, err := getNode(t, admin, node)
		if err != nil {
			return err
		}
		if hasTaint(n, shutdownTaint) {
			return fmt.Errorf("taints %v", n.Spec.Taints)
		}
		return nil
	})

	// The instance disappears: the not-ready Node is deleted; the ready one,
	// whose instance still exists, stays.
	nodes[node] = instance{gone: true}
	writeFile(t, file, cloudFile(plugin, nodes))
	setReady(t, admin, node, false)
	eventually(t, "node deleted", func() error {
		_, err := getNode(t, admin, node)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return errors.New("node still exists")
	})
	if _, err := admin.CoreV1().Nodes().Get(context.Background(), other, metav1.GetOptions{}); err != nil {
		t.Fatalf("the other node: %v", err)
	}
}

// TestRoutes runs upstream's RouteController through cloudsyncd against the
// example plug-in's route table: a Node with a pod CIDR inside cluster_cidr
// gets its route, which the controller reports with the Node's
// NetworkUnavailable condition turning False.
func TestRoutes(t *testing.T) {
	cp := controlplane.Get(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	dir := testenv.ShortDir(t, "csr")
	file := filepath.Join(dir, "cloud.yaml")
	sock := filepath.Join(dir, "cp.sock")
	const node = "e2e-route-node"
	writeFile(t, file, cloudFile(true, map[string]instance{node: {ip: "10.30.0.1"}})+"routes: true\n")
	run(t, "plugin", bin(t, pluginPkg), "--socket", sock, "--config", file)
	createNode(t, admin, node, false, true)
	eventually(t, "pod CIDR set", func() error {
		n, err := getNode(t, admin, node)
		if err != nil {
			return err
		}
		n.Spec.PodCIDR, n.Spec.PodCIDRs = "10.244.7.0/24", []string{"10.244.7.0/24"}
		_, err = admin.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
	p := cloudsyncd(t, "cloudsyncd-routes", append(controllerArgs(rbacKubeconfig(t, cp), "e2e-routes", "route"),
		"--cluster-cidr", "10.244.0.0/16", "--route-reconciliation-period", "1s",
		"--cloud-provider", "external", "--external-endpoint", "unix://"+sock)...)
	eventually(t, "route created", func() error {
		n, err := getNode(t, admin, node)
		if err != nil {
			return err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeNetworkUnavailable {
				if c.Status != corev1.ConditionFalse || c.Reason != "RouteCreated" {
					return fmt.Errorf("NetworkUnavailable %s (%s)", c.Status, c.Reason)
				}
				return nil
			}
		}
		return errors.New("no NetworkUnavailable condition yet")
	})

	// One mode per process: the node-mode API says so.
	cc, err := grpcclient.Dial("unix://" + p.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = cloudsyncv1.NewCloudSyncServiceClient(cc).GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "controller mode") {
		t.Fatalf("GetNodeAddresses in controller mode: %v, want FailedPrecondition naming controller mode", err)
	}
}
