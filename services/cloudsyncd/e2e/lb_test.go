package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// backend is a TCP server on ip answering every connection with its
// greeting, standing in for a pod; it returns the port.
func backend(t *testing.T, ip, greeting string) int {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = fmt.Fprintf(c, "%s\n", greeting)
			}()
		}
	}()
	return lis.Addr().(*net.TCPAddr).Port
}

// greet connects to addr and returns the first line it is sent.
func greet(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// lbService creates a selector-less LoadBalancer Service and the
// EndpointSlice an endpoints controller would write for it, pointing at
// backendIP:backendPort on node.
func lbService(t *testing.T, cs kubernetes.Interface, name string, port int32, backendIP string, backendPort int, node string) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "web", Port: port, TargetPort: intstr.FromInt(backendPort), Protocol: corev1.ProtocolTCP}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{}) })
	_, err = cs.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name + "-e2e",
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "cloudsyncd-e2e"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{backendIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true)},
			NodeName:   ptr.To(node),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("web"), Port: ptr.To(int32(backendPort)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.DiscoveryV1().EndpointSlices("default").Delete(context.Background(), name+"-e2e", metav1.DeleteOptions{})
	})
}

// ingress waits until the Service has the cleanup finalizer and one ingress
// IP inside pool, and returns the IP.
func ingress(t *testing.T, cs kubernetes.Interface, name string, pool netip.Prefix) string {
	t.Helper()
	var ip string
	eventually(t, name+" served", func() error {
		s, err := cs.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !slices.Contains(s.Finalizers, lbFinalizer) {
			return fmt.Errorf("finalizers %v", s.Finalizers)
		}
		in := s.Status.LoadBalancer.Ingress
		if len(in) != 1 {
			return fmt.Errorf("ingress %v", in)
		}
		a, err := netip.ParseAddr(in[0].IP)
		if err != nil || !pool.Contains(a) {
			return fmt.Errorf("ingress IP %q not in %s", in[0].IP, pool)
		}
		ip = in[0].IP
		return nil
	})
	return ip
}

// reaches waits until a connection to ip:port gets the backend's greeting.
func reaches(t *testing.T, ip string, port int32, greeting string) {
	t.Helper()
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	eventually(t, "TCP through "+addr, func() error {
		got, err := greet(addr)
		if err != nil {
			return err
		}
		if got != greeting {
			return fmt.Errorf("got %q, want %q", got, greeting)
		}
		return nil
	})
}

// metricsHave scrapes the process's --metrics-addr (found in its log) and
// checks that every want appears in the exposition.
func metricsHave(p *proc, want ...string) error {
	_, rest, ok := strings.Cut(p.Out.String(), `setting=metrics_addr addr=`)
	if !ok {
		return errors.New("no metrics address logged")
	}
	addr, _, _ := strings.Cut(rest, "\n")
	resp, err := http.Get("http://" + strings.Fields(addr)[0] + "/metrics")
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, body)
	}
	for _, w := range want {
		if !strings.Contains(string(body), w) {
			return fmt.Errorf("no %q in /metrics", w)
		}
	}
	return nil
}

// closed waits until nothing accepts connections on ip:port.
func closed(t *testing.T, ip string, port int32) {
	t.Helper()
	addr := net.JoinHostPort(ip, strconv.Itoa(int(port)))
	eventually(t, addr+" released", func() error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil
		}
		_ = c.Close()
		return errors.New("still accepting")
	})
}

func deleted(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	if err := cs.CoreV1().Services("default").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, name+" deleted (balancer released, then the finalizer)", func() error {
		s, err := cs.CoreV1().Services("default").Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("still there with finalizers %v", s.Finalizers)
	})
}

// TestLoadBalancerLocal is a LoadBalancer Service made real on this host by
// the local provider, driven by upstream's ServiceController in cloudsyncd:
// the finalizer and an ingress address appear, a TCP connection to that
// address reaches the backend, a port change moves the balancer, and
// deleting the Service releases the address before the finalizer goes.
func TestLoadBalancerLocal(t *testing.T) {
	cp := controlplane.Get(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	pool := netip.MustParsePrefix("127.0.77.0/28")
	createNode(t, admin, "e2e-lb-node", false, true)
	ip := testenv.HostIP(t)
	port := backend(t, ip, "hello from the backend")

	p := cloudsyncd(t, "cloudsyncd-lb", append(controllerArgs(rbacKubeconfig(t, cp), "e2e-lb", "service"),
		"--cloud-provider", "local", "--local-lb-pool", pool.String(), "--metrics-addr", "127.0.0.1:0")...)

	lbService(t, admin, "e2e-lb", 18080, ip, port, "e2e-lb-node")
	lbIP := ingress(t, admin, "e2e-lb", pool)
	reaches(t, lbIP, 18080, "hello from the backend")
	// Leadership and upstream's own controller metrics are exported.
	eventually(t, "metrics", func() error {
		return metricsHave(p, "cloudsyncd_leader 1", `cloudsyncd_controller_running{controller="service"} 1`,
			"service_controller_loadbalancer_sync_total", `workqueue_adds_total{name="service"}`)
	})

	// A port change is an update the controller acts on.
	eventually(t, "port changed", func() error {
		s, err := admin.CoreV1().Services("default").Get(context.Background(), "e2e-lb", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Ports[0].Port = 18081
		_, err = admin.CoreV1().Services("default").Update(context.Background(), s, metav1.UpdateOptions{})
		return err
	})
	reaches(t, lbIP, 18081, "hello from the backend")
	closed(t, lbIP, 18080)

	deleted(t, admin, "e2e-lb")
	closed(t, lbIP, 18081)
}
