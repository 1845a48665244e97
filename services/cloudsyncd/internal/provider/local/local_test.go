package local

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// tcpBackend answers each line with "<name>:<line>" until the test ends.
func tcpBackend(t *testing.T, ip, name string) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if _, err := fmt.Fprintf(c, "%s:%s\n", name, sc.Text()); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// udpBackend answers each datagram with "<name>:<datagram>".
func udpBackend(t *testing.T, ip, name string) int {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(name+":"+string(buf[:n])), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// eventually polls f until it returns nil, for up to 2*time.Minute.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, 2*time.Minute, f)
}

// askTCP opens a connection to addr, sends one line and returns the answer.
func askTCP(addr, line string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return "", err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(got), err
}

// askUDP sends one datagram to addr from a fresh socket and returns the answer.
func askUDP(addr, msg string) (string, error) {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// testPool is a loopback range of its own per test process, so parallel
// test binaries (and a dev cloudsyncd on 127.0.1.0/24) do not collide.
func testPool() string {
	return fmt.Sprintf("127.%d.%d.0/24", 100+os.Getpid()%100, os.Getpid()/100%250)
}

func slice(svc *corev1.Service, name string, ports []discoveryv1.EndpointPort, ready bool, addrs ...string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "cloudsyncd-test"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
	}
}

func epPort(name string, proto corev1.Protocol, port int) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Protocol: ptr.To(proto), Port: ptr.To(int32(port))}
}

// TestLocalLoadBalancer proves the local provider against the real
// kube-apiserver: a Service and its EndpointSlices are created there, the
// backends are real servers on an address of this host, and traffic goes
// through the address the provider allocates.
func TestLocalLoadBalancer(t *testing.T) {
	cp := controlplane.Get(t)
	cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := "local-lb"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	backend := testenv.HostIP(t)
	tcpA, tcpB, udpA := tcpBackend(t, backend, "a"), tcpBackend(t, backend, "b"), udpBackend(t, backend, "u")
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 18080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 18053},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ports := []discoveryv1.EndpointPort{epPort("http", corev1.ProtocolTCP, tcpA), epPort("dns", corev1.ProtocolUDP, udpA)}
	for _, s := range []*discoveryv1.EndpointSlice{
		slice(svc, "web-a", ports, true, backend),
		slice(svc, "web-b", []discoveryv1.EndpointPort{epPort("http", corev1.ProtocolTCP, tcpB)}, true, backend),
		// Not ready: never chosen.
		slice(svc, "web-c", []discoveryv1.EndpointPort{epPort("http", corev1.ProtocolTCP, 1)}, false, backend),
	} {
		if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create EndpointSlice %s: %v", s.Name, err)
		}
	}

	pool := testPool()
	p, err := New(Settings{Pool: []string{pool}}, cs, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	st, err := p.EnsureLoadBalancer(ctx, "kubernetes", svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Ingress) != 1 || st.Ingress[0].IPMode == nil || *st.Ingress[0].IPMode != corev1.LoadBalancerIPModeProxy {
		t.Fatalf("status %+v", st)
	}
	ip := st.Ingress[0].IP
	wantIP := strings.TrimSuffix(pool, "0/24") + "1"
	if ip != wantIP {
		t.Fatalf("first address %s, want %s (the pool's first usable one)", ip, wantIP)
	}
	// The status is written as the service controller would, so the
	// restart below can find the address again.
	svc.Status.LoadBalancer = *st
	if svc, err = cs.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	httpAddr := net.JoinHostPort(ip, "18080")

	// TCP: a real connection through the balancer, spread over both ready
	// backends, never to the one that is not ready.
	seen := map[string]bool{}
	eventually(t, "TCP through the balancer reaches both backends", func() error {
		got, err := askTCP(httpAddr, "hello")
		if err != nil {
			return err
		}
		name, rest, _ := strings.Cut(got, ":")
		if rest != "hello" || (name != "a" && name != "b") {
			return fmt.Errorf("answer %q", got)
		}
		seen[name] = true
		if !seen["a"] || !seen["b"] {
			return fmt.Errorf("backends seen so far: %v", seen)
		}
		return nil
	})

	// UDP: a datagram exchange through the balancer.
	eventually(t, "UDP through the balancer", func() error {
		got, err := askUDP(net.JoinHostPort(ip, "18053"), "ping")
		if err == nil && got != "u:ping" {
			err = fmt.Errorf("answer %q", got)
		}
		return err
	})

	// Ensure again: same address (stable per UID), nothing reopened.
	if st, err := p.EnsureLoadBalancer(ctx, "kubernetes", svc, nil); err != nil || st.Ingress[0].IP != ip {
		t.Fatalf("second Ensure: %+v %v", st, err)
	}
	if got, exists, err := p.GetLoadBalancer(ctx, "kubernetes", svc); err != nil || !exists || got.Ingress[0].IP != ip {
		t.Fatalf("GetLoadBalancer: %+v %v %v", got, exists, err)
	}

	// A connection held open across the port change and the delete.
	held, err := net.DialTimeout("tcp", httpAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldReader := bufio.NewReader(held)
	if _, err := fmt.Fprintln(held, "held"); err != nil {
		t.Fatal(err)
	}
	if _, err := heldReader.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	// Port change: 18080 -> 18081 moves the TCP listener, UDP stays.
	svc.Spec.Ports[0].Port = 18081
	if svc, err = cs.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.EnsureLoadBalancer(ctx, "kubernetes", svc, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := askTCP(net.JoinHostPort(ip, "18081"), "moved"); err != nil || !strings.HasSuffix(got, ":moved") {
		t.Fatalf("new port: %q %v", got, err)
	}
	if _, err := net.DialTimeout("tcp", httpAddr, 5*time.Second); err == nil {
		t.Fatal("the old port still accepts connections")
	}
	if got, err := heldReader.ReadString('\n'); err == nil {
		t.Fatalf("a connection of the closed port stays open: read %q", got)
	}
	if got, err := askUDP(net.JoinHostPort(ip, "18053"), "still"); err != nil || got != "u:still" {
		t.Fatalf("UDP after the TCP port change: %q %v", got, err)
	}

	// A restarted provider gives the Service the address its status shows,
	// even though another Service asks first.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	p2, err := New(Settings{Pool: []string{pool}}, cs, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other", UID: "other-uid"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "x", Protocol: corev1.ProtocolTCP, Port: 18090}}}}
	if st, err := p2.EnsureLoadBalancer(ctx, "kubernetes", svc, nil); err != nil || st.Ingress[0].IP != ip {
		t.Fatalf("after restart: %+v %v, want %s", st, err, ip)
	}
	if st, err := p2.EnsureLoadBalancer(ctx, "kubernetes", other, nil); err != nil || st.Ingress[0].IP == ip {
		t.Fatalf("second Service: %+v %v, want an address other than %s", st, err, ip)
	}
	// spec.loadBalancerIP: honoured in the pool, refused outside it or when taken.
	other.Spec.LoadBalancerIP = strings.TrimSuffix(pool, "0/24") + "200"
	if st, err := p2.EnsureLoadBalancer(ctx, "kubernetes", other, nil); err != nil || st.Ingress[0].IP != other.Spec.LoadBalancerIP {
		t.Fatalf("loadBalancerIP in the pool: %+v %v", st, err)
	}
	other.Spec.LoadBalancerIP = ip
	if _, err := p2.EnsureLoadBalancer(ctx, "kubernetes", other, nil); err == nil || !strings.Contains(err.Error(), "another Service") {
		t.Fatalf("loadBalancerIP of another Service: %v", err)
	}
	other.Spec.LoadBalancerIP = "192.0.2.1"
	if _, err := p2.EnsureLoadBalancer(ctx, "kubernetes", other, nil); err == nil || !strings.Contains(err.Error(), "not in local_lb_pool") {
		t.Fatalf("loadBalancerIP outside the pool: %v", err)
	}

	// Delete closes the listeners and frees the address.
	newHTTP := net.JoinHostPort(ip, "18081")
	eventually(t, "TCP after restart", func() error { _, err := askTCP(newHTTP, "x"); return err })
	if err := p2.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", newHTTP, 5*time.Second); err == nil {
		t.Fatal("the balancer still accepts connections after EnsureLoadBalancerDeleted")
	}
	if _, exists, err := p2.GetLoadBalancer(ctx, "kubernetes", svc); err != nil || exists {
		t.Fatalf("GetLoadBalancer after delete: exists=%v err=%v", exists, err)
	}
	if err := p2.EnsureLoadBalancerDeleted(ctx, "kubernetes", svc); err != nil {
		t.Fatalf("deleting twice: %v", err)
	}
}

// TestLocalInstances: every Node exists, none is shut down, and the
// provider ID is local://<name> unless the Node has one.
func TestLocalInstances(t *testing.T) {
	p := &Provider{}
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if ok, err := p.InstanceExists(ctx, n); err != nil || !ok {
		t.Fatal("every node exists")
	}
	if down, err := p.InstanceShutdown(ctx, n); err != nil || down {
		t.Fatal("no node is shut down")
	}
	if md, err := p.InstanceMetadata(ctx, n); err != nil || md.ProviderID != "local://n1" || len(md.NodeAddresses) != 0 {
		t.Fatalf("metadata %+v %v", md, err)
	}
	n.Spec.ProviderID = "aws:///z/i-1"
	if md, _ := p.InstanceMetadata(ctx, n); md.ProviderID != "aws:///z/i-1" {
		t.Fatalf("a Node's own provider ID is kept, got %q", md.ProviderID)
	}
}

// TestLocalUDPSessions: datagrams from one client address stick to one
// backend while the session lives; after the idle timeout the session ends
// and the client's next datagram starts a new one on the next backend.
// A narrow unit test: the EndpointSlice comes from a fake clientset.
func TestLocalUDPSessions(t *testing.T) {
	u1, u2 := udpBackend(t, "127.0.0.1", "u1"), udpBackend(t, "127.0.0.1", "u2")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dns", UID: "uid-dns"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 18054}}}}
	cs := fake.NewClientset(
		slice(svc, "dns-1", []discoveryv1.EndpointPort{epPort("dns", corev1.ProtocolUDP, u1)}, true, "127.0.0.1"),
		slice(svc, "dns-2", []discoveryv1.EndpointPort{epPort("dns", corev1.ProtocolUDP, u2)}, true, "127.0.0.1"),
	)
	p, err := New(Settings{Pool: []string{testPool()}, UDPIdleTimeout: 300 * time.Millisecond}, cs, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := p.EnsureLoadBalancer(ctx, "k", svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.Dial("udp", net.JoinHostPort(st.Ingress[0].IP, "18054"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ask := func(msg string) string {
		t.Helper()
		_ = client.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := client.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 256)
		n, err := client.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		name, _, _ := strings.Cut(string(buf[:n]), ":")
		return name
	}
	first := ask("one")
	for range 3 {
		if got := ask("again"); got != first {
			t.Fatalf("a live session moved from %s to %s", first, got)
		}
	}
	sessions := func() int {
		p.mu.Lock()
		l := p.byUID[svc.UID].listeners[portKey{corev1.ProtocolUDP, 18054}]
		p.mu.Unlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.conns)
	}
	eventually(t, "the idle session ends", func() error {
		if n := sessions(); n != 0 {
			return fmt.Errorf("%d sessions", n)
		}
		return nil
	})
	if got := ask("later"); got == first {
		t.Fatalf("after the idle timeout the new session went to %s again, want the next backend", got)
	}
}

// TestLocalAddressesSurviveLeaderChange: a new provider (a new leader, or a
// restarted cloudsyncd) gives each Service back the address its status
// shows, whatever order it ensures them in: a Service created meanwhile,
// ensured first, does not take an address another Service still shows.
func TestLocalAddressesSurviveLeaderChange(t *testing.T) {
	cp := controlplane.Get(t)
	cs := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := "local-lb-leader"
	if err := cp.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	create := func(name string) *corev1.Service {
		svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 18070}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	// A pool of its own: TestLocalLoadBalancer's Services show addresses
	// of testPool.
	pool := fmt.Sprintf("127.%d.%d.0/24", 100+os.Getpid()%100, (os.Getpid()/100+1)%250)
	ensure := func(p *Provider, svc *corev1.Service) string {
		t.Helper()
		st, err := p.EnsureLoadBalancer(ctx, "kubernetes", svc, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st.Ingress[0].IP
	}

	old, err := New(Settings{Pool: []string{pool}}, cs, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	first := create("first")
	addr := ensure(old, first)
	first.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: addr}}
	if first, err = cs.CoreV1().Services(ns).UpdateStatus(ctx, first, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	second := create("second")
	p, err := New(Settings{Pool: []string{pool}}, cs, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The Services come from the controllers' shared informers, as in
	// cloudsyncd, which starts the factory after SetInformers.
	f := informers.NewSharedInformerFactory(cs, 0)
	p.SetInformers(f)
	stop := make(chan struct{})
	f.Start(stop)
	defer func() { close(stop); f.Shutdown() }()
	if got := ensure(p, second); got == addr {
		t.Errorf("the new Service got %s, which %s/first still shows", got, ns)
	}
	if got := ensure(p, first); got != addr {
		t.Errorf("%s/first got %s after the change of provider, want its %s back", ns, got, addr)
	}
}
