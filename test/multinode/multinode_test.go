package multinode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/cninet"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

const labelTest = "microlet.test/multinode"

// allocatePodCIDRs is the test's stand-in for the controller manager's
// node IPAM (--allocate-node-cidrs, off in the shared test control plane):
// every Node labelled for this test without pod CIDRs gets the next of
// cidrs in spec.podCIDR(s).
func allocatePodCIDRs(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, id string, cidrs []string) {
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labelTest + "=" + id})
		if err != nil {
			return
		}
		for _, n := range nodes.Items {
			if len(n.Spec.PodCIDRs) > 0 || next >= len(cidrs) {
				continue
			}
			patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, cidrs[next], cidrs[next])
			if _, err := admin.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				next++
			}
		}
	}, 200*time.Millisecond)
}

// freeSubnets picks n /24s of 10.244.0.0/16 that no address of this host
// lies in.
func freeSubnets(t *testing.T, n int) []string {
	t.Helper()
	out, err := exec.Command("ip", "-o", "addr").Output()
	if err != nil {
		t.Fatal(err)
	}
	var picked []string
	for len(picked) < n {
		s := fmt.Sprintf("10.244.%d.0/24", 10+rand.Intn(90))
		if !strings.Contains(string(out), strings.TrimSuffix(s, "0/24")) && !slices.Contains(picked, s) {
			picked = append(picked, s)
		}
	}
	return picked
}

// pinned lists the network namespaces the node's runtime-shim holds
// pinned (one per attached sandbox), wherever its data dir is.
func pinned(n *node.Node) []string {
	var out []string
	_ = filepath.WalkDir(n.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) == "netns" && strings.HasSuffix(filepath.Dir(filepath.Dir(p)), "/cni") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// criExec runs cmd in the pod's container through the node's runtime-shim.
func criExec(ctx context.Context, n *node.Node, ns, pod string, cmd ...string) (string, error) {
	cc, err := grpcclient.Dial(components.Endpoint(n.RunDir, components.RuntimeShim))
	if err != nil {
		return "", err
	}
	defer cc.Close()
	rt := runtimeapi.NewRuntimeServiceClient(cc)
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.name": pod, "io.kubernetes.pod.namespace": ns}}})
	if err != nil {
		return "", err
	}
	if len(cs.Containers) != 1 {
		return "", fmt.Errorf("%d running containers of %s/%s", len(cs.Containers), ns, pod)
	}
	r, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: cs.Containers[0].Id, Cmd: cmd, Timeout: 20})
	if err != nil {
		return "", err
	}
	if r.ExitCode != 0 {
		return string(r.Stdout), fmt.Errorf("%q exited %d: %s", cmd, r.ExitCode, r.Stderr)
	}
	return string(r.Stdout), nil
}

// TestTwoNodesOnePodNetwork: two microlet nodes in one cluster, each
// runtime-shim in the cni mode with --pod-network=bridge. Each node's pod
// network lives in a network namespace of its own, the node's "host",
// joined to this machine by a veth pair: the node's InternalIP is the
// host's end, and this machine stands for the network between hosts (see
// nodeHost). Each Node gets a pod CIDR, which nodestatusd hands to its
// runtime-shim, which writes the node's bridge network: the Nodes turn
// Ready only then. cloudsyncd's route controller (--controllers route,
// provider local) routes each Node's CIDR via its InternalIP and clears
// NetworkUnavailable. A web pod on each node gets an address of its node's
// CIDR and turns Ready (its probe comes from this machine through the
// route), each pod reaches the other's by pod IP, and a Service's
// EndpointSlice lists both. When a Node goes, so does its route, and the
// other pod cannot reach its pod any more.
func TestTwoNodesOnePodNetwork(t *testing.T) {
	cp := controlplane.GetFull(t)
	plugins := cninet.Plugins(t)
	testenv.RequireRoot(t, "the CNI plugins")
	id := rand.String(6)
	subnets := freeSubnets(t, 3)
	cidrs, links := subnets[:2], netip.MustParsePrefix(subnets[2])
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	bins := node.Binaries(t)

	// The route controller's routes carry a protocol number of this run's,
	// so that tests running at once never list each other's.
	proto := 150 + rand.Intn(100)
	hosts := make([]*nodeHost, 2)
	for i := range hosts {
		hosts[i] = newNodeHost(t, fmt.Sprintf("%s%d", id, i), links, i, plugins)
	}
	// Runs after cloudsyncd stopped, before the hosts go.
	t.Cleanup(func() { removeRoutes(t, proto) })
	ccm := testenv.ShortDir(t, "mlc")
	testenv.StartProcess(t, "cloudsyncd", filepath.Join(bins, components.CloudSyncd),
		"--run-dir", ccm, "--data-dir", ccm, "--node-name", "multinode-"+id,
		"--kubeconfig", cp.AdminKubeconfig(), "--controllers", "route", "--leader-elect=false",
		"--cloud-provider", "local", "--local-route-protocol", fmt.Sprint(proto),
		"--cluster-cidr", "10.244.0.0/16", "--route-reconciliation-period", "1s")
	allocatePodCIDRs(ctx, t, cp, id, cidrs)

	var nodes []*node.Node
	for i, h := range hosts {
		bridge := fmt.Sprintf("mln%s%d", id, i)
		n := node.Start(t, node.Options{ControlPlane: cp, Args: map[string][]string{
			components.RuntimeShim: {"--network-plugin=cni", "--cni-conf-dir=" + t.TempDir(), "--cni-bin-dir=" + h.binDir,
				"--pod-network=bridge", "--cni-bridge=" + bridge},
			components.NodeStatusd: {"--node-labels=" + labelTest + "=" + id, "--node-ip=" + h.ip.String()},
		}})
		nodes = append(nodes, n)
	}
	admin := nodes[0].Admin
	ns := "multinode-" + id
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Runs before the nodes stop: the pods go through podsyncd, so every
	// sandbox is torn down by CNI DEL (no address, rule or pinned
	// namespace left behind).
	var ips []string
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		for _, n := range nodes {
			testenv.Eventually(t, "pod networks of "+n.Name+" torn down", 2*time.Minute, func() error {
				if pins := pinned(n); len(pins) > 0 {
					return fmt.Errorf("pinned namespaces left: %v", pins)
				}
				return nil
			})
		}
		for _, h := range hosts {
			out, _ := exec.Command("ip", "netns", "exec", h.netns, "iptables-save").Output()
			for _, ip := range ips {
				if strings.Contains(string(out), " "+ip+"/32 ") {
					t.Errorf("iptables rules of pod IP %s left in %s after the pods were deleted", ip, h.netns)
				}
			}
		}
	})

	podCIDR := map[string]netip.Prefix{}
	for _, n := range nodes {
		no, err := admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(no.Spec.PodCIDRs) != 1 {
			t.Fatalf("node %s Ready without a pod CIDR: %v", n.Name, no.Spec.PodCIDRs)
		}
		podCIDR[n.Name] = netip.MustParsePrefix(no.Spec.PodCIDRs[0])
	}
	if podCIDR[nodes[0].Name] == podCIDR[nodes[1].Name] {
		t.Fatalf("both nodes got %s", podCIDR[nodes[0].Name])
	}

	// The route controller routes each Node's CIDR via its host and says
	// so in the Node's NetworkUnavailable condition.
	testenv.Eventually(t, "routes of both pod CIDRs via the nodes' hosts", time.Minute, func() error {
		got := ownRoutes(t, proto)
		for i, n := range nodes {
			if gw := got[podCIDR[n.Name]]; gw != hosts[i].ip {
				return fmt.Errorf("route to %s via %v, want via %s (routes %v)", podCIDR[n.Name], gw, hosts[i].ip, got)
			}
		}
		return nil
	})
	for _, n := range nodes {
		testenv.Eventually(t, n.Name+" NetworkUnavailable=False by the route controller", time.Minute, func() error {
			no, err := admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range no.Status.Conditions {
				if c.Type == corev1.NodeNetworkUnavailable {
					if c.Status != corev1.ConditionFalse || c.Reason != "RouteCreated" {
						return fmt.Errorf("NetworkUnavailable %s (%s)", c.Status, c.Reason)
					}
					return nil
				}
			}
			return errors.New("no NetworkUnavailable condition")
		})
	}

	sel := map[string]string{"app": "web-" + id}
	for i, n := range nodes {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: ns, Labels: sel},
			Spec: corev1.PodSpec{
				NodeName:                      n.Name,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					Name: "web", Image: n.Image, ImagePullPolicy: corev1.PullIfNotPresent,
					Command:        []string{"sh", "-c", fmt.Sprintf("mkdir -p /www && echo web-%d > /www/index.html && exec httpd -f -p 8080 -h /www", i)},
					Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}, PeriodSeconds: 1},
				}},
			},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ips = make([]string, 2)
	for i, n := range nodes {
		p := n.WaitPod(ns, fmt.Sprintf("web-%d", i), "ready with a pod IP", func(p *corev1.Pod) bool {
			return node.Ready(p) && p.Status.PodIP != "" && p.Status.PodIP != p.Status.HostIP
		})
		ip, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || !podCIDR[n.Name].Contains(ip) {
			t.Fatalf("pod %s on %s has IP %q, want one of its node's %s", p.Name, n.Name, p.Status.PodIP, podCIDR[n.Name])
		}
		ips[i] = p.Status.PodIP
		if pins := pinned(n); len(pins) != 1 {
			t.Fatalf("node %s holds %d pinned namespaces, want its one pod's: %v", n.Name, len(pins), pins)
		}
	}

	// Each pod fetches the other's page by pod IP, across the two nodes.
	fetch := func(i int) error {
		other := 1 - i
		out, err := criExec(ctx, nodes[i], ns, fmt.Sprintf("web-%d", i), "sh", "-c",
			`printf 'GET /index.html HTTP/1.0\r\n\r\n' | nc -w 3 `+ips[other]+` 8080`)
		if err != nil {
			return err
		}
		if !strings.HasSuffix(out, fmt.Sprintf("web-%d\n", other)) {
			return fmt.Errorf("got %q", out)
		}
		return nil
	}
	for i := range nodes {
		testenv.Eventually(t, fmt.Sprintf("web-%d reaches web-%d at %s", i, 1-i, ips[1-i]), time.Minute, func() error { return fetch(i) })
	}

	// A Service over both: its EndpointSlice lists both pod IPs, ready.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: sel, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := admin.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "EndpointSlice of the Service lists both pods", 2*time.Minute, func() error {
		eps, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
		if err != nil {
			return err
		}
		var ready []string
		for _, s := range eps.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready = append(ready, e.Addresses...)
				}
			}
		}
		slices.Sort(ready)
		want := slices.Clone(ips)
		slices.Sort(want)
		if !slices.Equal(ready, want) {
			return fmt.Errorf("ready endpoints %v, want %v", ready, want)
		}
		return nil
	})

	// Node 1 goes (nodestatusd registers it again, without a pod CIDR):
	// the route controller deletes its route, and web-0's traffic to web-1
	// has no way there any more.
	if err := admin.CoreV1().Nodes().Delete(ctx, nodes[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "route of the deleted Node removed", time.Minute, func() error {
		got := ownRoutes(t, proto)
		if gw, ok := got[podCIDR[nodes[1].Name]]; ok {
			return fmt.Errorf("route to %s via %s still there", podCIDR[nodes[1].Name], gw)
		}
		if got[podCIDR[nodes[0].Name]] != hosts[0].ip {
			return fmt.Errorf("route of %s gone too: %v", nodes[0].Name, got)
		}
		return nil
	})
	// web-1 still runs and its node's traffic still has the route to
	// web-0's CIDR; only the way to web-1's CIDR is gone.
	if err := fetch(1); err != nil {
		t.Errorf("web-1 no longer reaches web-0, whose route stays: %v", err)
	}
	if err := fetch(0); err == nil {
		t.Errorf("web-0 still reaches web-1 at %s without the route to %s", ips[1], podCIDR[nodes[1].Name])
	}
}
