package podnet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/cninet"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// ip runs ip(8) and fails the test on error.
func ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// namedNetns adds a named network namespace (so ip netns exec reaches it)
// with lo up, deleted when the test ends.
func namedNetns(t testing.TB, name string) netns.NsHandle {
	t.Helper()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		testenv.RequireOrSkip(t, "ip netns add (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip(t, "-n", name, "link", "set", "lo", "up")
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// nsExec runs CNI plugins inside a node's network namespace, as the
// node's containerd would.
type nsExec struct {
	ns string
	invoke.RawExec
}

func (e nsExec) ExecPlugin(ctx context.Context, plugin string, stdin []byte, env []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", e.ns, plugin)
	cmd.Stdin, cmd.Env = bytes.NewReader(stdin), env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w: %s%s", plugin, e.ns, err, out, stderr.Bytes())
	}
	return out, nil
}

func (e nsExec) Decode(b []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(b)
}

// inNetns runs f on a thread inside ns; sockets f opens stay there.
func inNetns(t testing.TB, ns netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic(err) // a thread left in the wrong namespace poisons the process
		}
	}()
	f()
}

// TestTwoNodesPodToPod builds two "nodes" (network namespaces joined by a
// veth pair, standing for the cluster's Docker network), runs one agent per
// node against a real kube-apiserver, attaches a "pod" to each node with the
// CNI reference plugins and the conflist the agent wrote, and connects from
// one pod to the other over TCP: the route podnet programmed carries it,
// and the server sees the client's pod address (no masquerade inside the
// pod network).
func TestTwoNodesPodToPod(t *testing.T) {
	dp := newDataplane(t)
	conn := dp.dial(t, dp.pods[0], dp.pods[1])
	msg := []byte("across nodes")
	if _, err := conn.c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn.c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, %v", got, err)
	}
	conn.c.Close()
	if from := <-conn.seen; from != dp.pods[0].ip {
		t.Errorf("server saw the client as %s, want its pod address %s", from, dp.pods[0].ip)
	}
	t.Logf("pod %s on %s reached pod %s on %s", dp.pods[0].ip, dp.pods[0].node, dp.pods[1].ip, dp.pods[1].node)
}

// pod is a network namespace attached to a node's pod network.
type pod struct {
	node, ip string
	ns       netns.NsHandle
}

// dataplane is two nodes with podnet and three pods: pods[0] and pods[2]
// on the first node, pods[1] on the second.
type dataplane struct{ pods []pod }

func newDataplane(t testing.TB) *dataplane {
	t.Helper()
	plugins := cninet.Plugins(t)
	cp := controlplane.Get(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("pn%d", os.Getpid()%100000)
	type node struct {
		name, ns, addr, cidr string
		h                    netns.NsHandle
		conf, ipam           string
	}
	nodes := []*node{
		{name: "dp-a", ns: tag + "-a", addr: "172.30.98.1", cidr: "10.244.101.0/24"},
		{name: "dp-b", ns: tag + "-b", addr: "172.30.98.2", cidr: "10.244.102.0/24"},
	}
	for _, n := range nodes {
		n.h = namedNetns(t, n.ns)
		n.conf = filepath.Join(t.TempDir(), "net.d")
		n.ipam = filepath.Join(t.TempDir(), "ipam") // one per node, as on a real node
	}
	ip(t, "link", "add", tag+"a", "netns", nodes[0].ns, "type", "veth", "peer", "name", tag+"b", "netns", nodes[1].ns)
	for i, n := range nodes {
		dev := tag + string(rune('a'+i))
		ip(t, "-n", n.ns, "addr", "add", n.addr+"/24", "dev", dev)
		ip(t, "-n", n.ns, "link", "set", dev, "up")
	}

	for _, n := range nodes {
		created, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: n.name},
			Spec:       corev1.NodeSpec{PodCIDR: n.cidr, PodCIDRs: []string{n.cidr}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		setIP(ctx, t, cs, created, n.addr)
		t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), n.name, metav1.DeleteOptions{}) })
	}
	for _, n := range nodes {
		h, err := netlink.NewHandleAt(n.h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Close)
		a, err := New(Config{NodeName: n.name, ClusterCIDR: "10.244.0.0/16", CNIConfDir: n.conf, Resync: time.Hour}, cs,
			WithRouteTable(NetlinkRoutes{Handle: h}), WithMasquerader(Iptables{Prefix: []string{"ip", "netns", "exec", n.ns}}))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("%s: Run: %v", n.name, err)
			}
		})
	}
	// Each node has its conflist and a route to the other's pod CIDR.
	for i, n := range nodes {
		other := nodes[1-i]
		rt := NetlinkRoutes{}
		h, _ := netlink.NewHandleAt(n.h)
		rt.Handle = h
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			rs, err := rt.List()
			if err != nil {
				return false, err
			}
			_, statErr := os.Stat(filepath.Join(n.conf, ConflistName))
			return statErr == nil && len(rs) == 1 && rs[0].Dst.String() == other.cidr && rs[0].Via.String() == other.addr, nil
		})
		h.Close()
		if err != nil {
			t.Fatalf("%s: no conflist or route to %s via %s: %v", n.name, other.cidr, other.addr, err)
		}
	}

	// One pod per node, attached with the agent's conflist (host-local's
	// state kept in the test's directory).
	dp := &dataplane{}
	for i, n := range []*node{nodes[0], nodes[1], nodes[0]} {
		name := fmt.Sprintf("%s-pod%d", n.ns, i)
		podNS := namedNetns(t, name)
		data, err := os.ReadFile(filepath.Join(n.conf, ConflistName))
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.Replace(data, []byte(`"type": "host-local"`),
			[]byte(fmt.Sprintf(`"type": "host-local", "dataDir": %q`, n.ipam)), 1)
		list, err := libcni.ConfListFromBytes(data)
		if err != nil {
			t.Fatal(err)
		}
		cni := libcni.NewCNIConfigWithCacheDir([]string{plugins}, t.TempDir(), &nsExec{ns: n.ns})
		rc := &libcni.RuntimeConf{ContainerID: name, NetNS: "/var/run/netns/" + name, IfName: "eth0"}
		res, err := cni.AddNetworkList(ctx, list, rc)
		if err != nil {
			t.Fatalf("%s: CNI ADD: %v", n.name, err)
		}
		t.Cleanup(func() { _ = cni.DelNetworkList(context.Background(), list, rc) })
		r, err := types100.GetResult(res)
		if err != nil || len(r.IPs) == 0 {
			t.Fatalf("%s: CNI result %v: %v", n.name, res, err)
		}
		dp.pods = append(dp.pods, pod{node: n.name, ip: r.IPs[0].Address.IP.String(), ns: podNS})
	}
	return dp
}

// echoConn is a TCP connection from one pod to an echo server in another.
type echoConn struct {
	c    net.Conn
	seen chan string // the client address the server saw, once it closes
}

func (dp *dataplane) dial(t testing.TB, from, to pod) echoConn {
	t.Helper()
	var (
		l   net.Listener
		err error
	)
	inNetns(t, to.ns, func() {
		l, err = net.Listen("tcp", net.JoinHostPort(to.ip, "0"))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	seen := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			seen <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
		seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
	}()
	var c net.Conn
	inNetns(t, from.ns, func() {
		d := net.Dialer{Timeout: 10 * time.Second}
		c, err = d.Dial("tcp", l.Addr().String())
	})
	if err != nil {
		t.Fatalf("pod on %s -> pod on %s (%s): %v", from.node, to.node, l.Addr(), err)
	}
	t.Cleanup(func() { c.Close() })
	return echoConn{c: c, seen: seen}
}

// BenchmarkPodToPod measures TCP between pods through podnet's data path:
// across nodes (pod, bridge, the node's route to the other node's pod
// CIDR, veth, bridge, pod) against two pods on one node's bridge. Node
// "wires" are veth pairs here, not the cluster's Docker network; the
// numbers compare the paths on one host.
//
//	go test -run '^$' -bench PodToPod -benchtime 2s ./test/cluster/addons/podnet
func BenchmarkPodToPod(b *testing.B) {
	dp := newDataplane(b)
	for _, path := range []struct {
		name     string
		from, to pod
	}{{"cross-node", dp.pods[0], dp.pods[1]}, {"same-node", dp.pods[2], dp.pods[0]}} {
		b.Run(path.name+"/throughput-1MiB", func(b *testing.B) {
			conn := dp.dial(b, path.from, path.to)
			out, in := make([]byte, 1<<20), make([]byte, 1<<20)
			b.SetBytes(int64(len(out)))
			b.ResetTimer()
			for range b.N {
				// Write while reading: the echo would stall once both
				// directions' socket buffers are full.
				go func() { _, _ = conn.c.Write(out) }()
				if _, err := io.ReadFull(conn.c, in); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(path.name+"/round-trip-1B", func(b *testing.B) {
			conn := dp.dial(b, path.from, path.to)
			one := []byte{1}
			b.ResetTimer()
			for range b.N {
				if _, err := conn.c.Write(one); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(conn.c, one); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
