package addons

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// findCoreDNS is $MICROLET_COREDNS, else hack/build-coredns.sh's cached
// binary for the version test/cluster/addons/coredns/go.mod pins.
func findCoreDNS(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MICROLET_COREDNS"); p != "" {
		return p
	}
	mod, err := os.ReadFile(filepath.Join("coredns", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?github.com/coredns/coredns (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("no coredns version in coredns/go.mod")
	}
	base := os.Getenv("MICROLET_CACHE_DIR")
	if base == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		base = filepath.Join(c, "microlet")
	}
	p := filepath.Join(base, "coredns", string(m[1]), "coredns")
	if _, err := os.Stat(p); err != nil {
		testenv.RequireOrSkip(t, "no CoreDNS binary (hack/build-coredns.sh, or set MICROLET_COREDNS): %v", err)
	}
	return p
}

// freePort is a port free for both UDP and TCP on 127.0.0.1 right now.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestCoreDNSAnswersFromAPIServer runs the CoreDNS binary the add-on ships
// with the add-on's Corefile, moved to loopback ports and given the test
// API server's kubeconfig, and resolves Services through it.
func TestCoreDNSAnswersFromAPIServer(t *testing.T) {
	bin := findCoreDNS(t)
	cp := controlplane.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		t.Fatal(err)
	}
	svc, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "dns-probe"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Services("default").Delete(context.Background(), "dns-probe", metav1.DeleteOptions{})
	})

	dnsPort, healthPort, readyPort, metricsPort := freePort(t), freePort(t), freePort(t), freePort(t)
	// The add-on's Corefile, on loopback only: the forwarder points at a
	// closed loopback port so nothing leaves the machine.
	conf := strings.NewReplacer(
		".:53 {", fmt.Sprintf(".:%d {\n    bind 127.0.0.1", dnsPort),
		"health {", fmt.Sprintf("health 127.0.0.1:%d {", healthPort),
		"    ready\n", fmt.Sprintf("    ready 127.0.0.1:%d\n", readyPort),
		"prometheus :9153", fmt.Sprintf("prometheus 127.0.0.1:%d", metricsPort),
		"pods insecure", "kubeconfig "+cp.AdminKubeconfig()+"\n        pods insecure",
		"forward . /etc/resolv.conf", "forward . 127.0.0.1:9",
	).Replace(corefile("cluster.local"))
	confPath := filepath.Join(t.TempDir(), "Corefile")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "-conf", confPath)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("coredns output:\n%s", out)
		}
	})

	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", dnsPort))
	}}
	for name, want := range map[string]string{
		"dns-probe.default.svc.cluster.local.":  svc.Spec.ClusterIP,
		"kubernetes.default.svc.cluster.local.": "",
	} {
		var got []string
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, _ = r.LookupHost(ctx, name)
			return len(got) > 0, nil
		})
		if err != nil {
			t.Fatalf("%s: no answer: %v", name, err)
		}
		if want != "" && (len(got) != 1 || got[0] != want) {
			t.Errorf("%s = %v, want [%s]", name, got, want)
		}
		t.Logf("%s -> %v", name, got)
	}
}
