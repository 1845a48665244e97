package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	cloudsyncv1 "github.com/microlet/microlet/proto/microlet/cloudsync/v1"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// buildFlags are the go build flags of the binary under test; race_test.go
// adds -race when the tests run with it.
var buildFlags []string

// binary builds cmd cloudsyncd once per test binary: the tests run the real
// program, flags, socket and exit codes included.
func binary(t testing.TB) string {
	t.Helper()
	return filepath.Join(testenv.Build(t, buildFlags, "github.com/microlet/microlet/services/cloudsyncd"), "cloudsyncd")
}

type proc struct {
	cmd    *exec.Cmd
	stderr *testenv.LockedBuffer
	client cloudsyncv1.CloudSyncServiceClient
	cc     *grpc.ClientConn
}

func shortDir(t testing.TB) string { return testenv.ShortDir(t, "cs") }

// start runs cloudsyncd with args in its own run dir and waits for SERVING.
func start(t testing.TB, args ...string) *proc {
	t.Helper()
	dir := shortDir(t)
	p := &proc{stderr: &testenv.LockedBuffer{}}
	p.cmd = exec.Command(binary(t), append([]string{"--run-dir", dir, "--data-dir", dir}, args...)...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("cloudsyncd stderr:\n%s", p.stderr.String())
		}
	})
	cc, err := grpcclient.Dial("unix://" + filepath.Join(dir, "cloudsyncd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := grpcclient.WaitServing(ctx, cc, ""); err != nil {
		t.Fatalf("%v\nstderr:\n%s", err, p.stderr.String())
	}
	p.cc, p.client = cc, cloudsyncv1.NewCloudSyncServiceClient(cc)
	return p
}

func staticDoc(ip string, shutdown bool) string {
	return fmt.Sprintf("provider_id: static://lab/%s\ninstance_type: m1.metal\nzone: rack1\nregion: dc1\nshutdown: %v\nlabels: {example.com/pool: gpu}\naddresses:\n- {type: InternalIP, address: %s}\n- {type: Hostname, address: host-%s}\n", ip, shutdown, ip, ip)
}

func writeFile(t testing.TB, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func decode(t testing.TB, raw [][]byte) []corev1.NodeAddress {
	t.Helper()
	out := make([]corev1.NodeAddress, len(raw))
	for i, b := range raw {
		if err := out[i].Unmarshal(b); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// eventually polls f until it returns nil, for up to 60*time.Second.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, 60*time.Second, f)
}

func TestBadConfigIsOneLineNamingTheField(t *testing.T) {
	dir := shortDir(t)
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("addresses:\n- {type: InternalIP, address: nope}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "cloudsyncd.yaml")
	if err := os.WriteFile(cfg, []byte("cloud_provider: metadata\nmetadata_token_ttl: 10h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cloud-provider", "static"}, "static_file: required"},
		{[]string{"--cloud-provider", "static", "--static-file", filepath.Join(dir, "missing.yaml")}, "static_file"},
		{[]string{"--cloud-provider", "static", "--static-file", bad}, `addresses[0].address "nope"`},
		{[]string{"--cloud-provider", "metadata", "--metadata-endpoint", "169.254.169.254"}, "metadata_endpoint"},
		{[]string{"--config", cfg}, "metadata_token_ttl"},
		{[]string{"--cloud-provider", "external"}, "external_endpoint: required"},
		{[]string{"--cloud-provider", "external", "--external-endpoint", "tcp://x:1"}, "external_endpoint"},
		{[]string{"--cloud-provider", "nosuchcloud"}, `cloud_provider "nosuchcloud"`},
		{[]string{"--sync-frequency", "0s"}, "sync_frequency"},
		{[]string{"--provider-timeout", "-1s"}, "provider_timeout"},
		{[]string{"--controllers", "service,nodes"}, `controllers: unknown controller "nodes"`},
		{[]string{"--controllers", "service", "--cloud-provider", "local"}, "controllers: need kubeconfig or cloud_kubeconfig"},
		{[]string{"--controllers", "route", "--cloud-provider", "local"}, "cluster_cidr: required by the route controller"},
		{[]string{"--controllers", "route", "--cluster-cidr", "10.244.0.0"}, "cluster_cidr"},
		{[]string{"--controllers", "node", "--leader-elect-lease-duration", "10s"}, "leader_elect_lease_duration"},
		{[]string{"--controllers", "node", "--leader-elect-retry-period", "9s"}, "leader_elect_renew_deadline"},
		{[]string{"--controllers", "node", "--node-monitor-period", "0s"}, "node_monitor_period"},
		{[]string{"--controllers", "service", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig /nonexistent/kubeconfig"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			cmd := exec.Command(binary(t), append([]string{"--run-dir", dir}, tc.args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want 2; stderr:\n%s", err, stderr.String())
			}
			msg := strings.TrimSuffix(stderr.String(), "\n")
			if strings.Contains(msg, "\n") || !strings.Contains(msg, tc.want) {
				t.Fatalf("stderr %q: want one line containing %q", msg, tc.want)
			}
		})
	}
}

func TestNoProviderIsFailedPrecondition(t *testing.T) {
	p := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.client.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("GetNodeAddresses: %v, want FailedPrecondition", err)
	}
	_, err = p.client.GetInstanceMetadata(ctx, &cloudsyncv1.GetInstanceMetadataRequest{})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("GetInstanceMetadata: %v, want FailedPrecondition", err)
	}
	w, err := p.client.WatchNodeAddresses(ctx, &cloudsyncv1.WatchNodeAddressesRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("WatchNodeAddresses: %v, want FailedPrecondition", err)
	}
}

func TestStaticProviderOverSocket(t *testing.T) {
	dir := shortDir(t)
	file := filepath.Join(dir, "cloud.yaml")
	writeFile(t, file, staticDoc("10.0.0.1", false))
	p := start(t, "--cloud-provider", "static", "--static-file", file, "--sync-frequency", "200ms", "--metrics-addr", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	resp, err := p.client.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if a := decode(t, resp.GetAddresses()); len(a) != 2 || a[0].Address != "10.0.0.1" {
		t.Fatalf("addresses %v", a)
	}
	md, err := p.client.GetInstanceMetadata(ctx, &cloudsyncv1.GetInstanceMetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if md.GetProviderId() != "static://lab/10.0.0.1" || md.GetInstanceType() != "m1.metal" || md.GetZone() != "rack1" ||
		md.GetRegion() != "dc1" || md.GetAdditionalLabels()["example.com/pool"] != "gpu" || md.GetShutdown() {
		t.Fatalf("metadata %v", md)
	}

	w, err := p.client.WatchNodeAddresses(ctx, &cloudsyncv1.WatchNodeAddressesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil || decode(t, first.GetAddresses())[0].Address != "10.0.0.1" {
		t.Fatalf("first watch message %v %v", first, err)
	}
	// The provider is asked several more times with nothing changed (counted
	// where it shows, cloudsyncd_address_syncs_total); the watch must stay
	// silent through them, so its next message is the change.
	syncs := func() (float64, error) {
		addr, err := testenv.LoggedHTTPAddr(p.stderr.String(), "metrics_addr")
		if err != nil {
			return 0, err
		}
		m, err := testenv.ScrapeMetrics(ctx, "http://"+addr+"/metrics")
		if err != nil {
			return 0, err
		}
		return m.Sum("cloudsyncd_address_syncs_total", map[string]string{"result": "success"}), nil
	}
	var base float64
	eventually(t, "metrics served", func() (err error) { base, err = syncs(); return err })
	eventually(t, "three unchanged syncs", func() error {
		n, err := syncs()
		if err == nil && n < base+3 {
			err = fmt.Errorf("%v syncs since the first message", n-base)
		}
		return err
	})
	writeFile(t, file, staticDoc("10.0.0.2", false))
	next, err := w.Recv()
	if err != nil || decode(t, next.GetAddresses())[0].Address != "10.0.0.2" {
		t.Fatalf("watch after the change sent %v %v, want 10.0.0.2 and nothing before it", next, err)
	}
}

func TestProviderDownIsUnavailableWithReason(t *testing.T) {
	dir := shortDir(t)
	p := start(t, "--cloud-provider", "external", "--external-endpoint", "unix://"+filepath.Join(dir, "none.sock"), "--provider-timeout", "1s")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.client.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "cloud provider external") {
		t.Fatalf("got %v, want Unavailable naming the provider's failure", err)
	}
}

// nodeWithTaint registers a Node as nodestatusd would, carrying the taint a
// kubelet with an external cloud provider starts with.
func nodeWithTaint(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{
			Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: corev1.TaintEffectNoSchedule,
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func taintKeys(n *corev1.Node) string {
	var keys []string
	for _, t := range n.Spec.Taints {
		keys = append(keys, t.Key)
	}
	return strings.Join(keys, ",")
}

func TestNodeInitWithCloudCredential(t *testing.T) {
	cp := controlplane.Get(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	const node = "cs-init-admin"
	nodeWithTaint(t, admin, node)
	dir := shortDir(t)
	file := filepath.Join(dir, "cloud.yaml")
	writeFile(t, file, staticDoc("10.9.0.1", false))
	start(t, "--node-name", node, "--cloud-provider", "static", "--static-file", file,
		"--sync-frequency", "300ms", "--kubeconfig", cp.NodeKubeconfig(node), "--cloud-kubeconfig", cp.AdminKubeconfig())

	get := func() *corev1.Node {
		n, err := admin.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, "node initialised", func() error {
		n := get()
		if strings.Contains(taintKeys(n), "uninitialized") {
			return fmt.Errorf("taints still %s", taintKeys(n))
		}
		return nil
	})
	n := get()
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
			t.Errorf("label %s=%q, want %q", k, n.Labels[k], v)
		}
	}
	if n.Spec.ProviderID != "static://lab/10.9.0.1" {
		t.Errorf("providerID %q", n.Spec.ProviderID)
	}
	if len(n.Status.Addresses) != 2 || n.Status.Addresses[0].Address != "10.9.0.1" || n.Status.Addresses[1].Type != corev1.NodeHostName {
		t.Errorf("addresses %v", n.Status.Addresses)
	}

	writeFile(t, file, staticDoc("10.9.0.1", true))
	eventually(t, "shutdown taint added", func() error {
		if !strings.Contains(taintKeys(get()), "node.cloudprovider.kubernetes.io/shutdown") {
			return fmt.Errorf("taints %s", taintKeys(get()))
		}
		return nil
	})
	writeFile(t, file, staticDoc("10.9.0.1", false))
	eventually(t, "shutdown taint removed", func() error {
		if k := taintKeys(get()); strings.Contains(k, "shutdown") {
			return fmt.Errorf("taints %s", k)
		}
		return nil
	})
}

func TestNodeInitWithNodeIdentityIsReportedAndHarmless(t *testing.T) {
	cp := controlplane.Get(t)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	const node = "cs-init-self"
	nodeWithTaint(t, admin, node)
	dir := shortDir(t)
	file := filepath.Join(dir, "cloud.yaml")
	writeFile(t, file, staticDoc("10.9.0.2", false))
	// No cloud_kubeconfig: only the node's own identity is available.
	p := start(t, "--node-name", node, "--cloud-provider", "static", "--static-file", file,
		"--sync-frequency", "300ms", "--kubeconfig", cp.NodeKubeconfig(node))

	var line string
	eventually(t, "refusal logged", func() error {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "cloud node initialisation disabled") {
				line = l
				return nil
			}
		}
		return errors.New("no log line yet")
	})
	for _, want := range []string{"system:node:" + node, "taints", "cloud_kubeconfig"} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q does not mention %q", line, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := p.client.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{})
	if err != nil || decode(t, resp.GetAddresses())[0].Address != "10.9.0.2" {
		t.Fatalf("the API must keep working: %v %v", resp, err)
	}
	n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(taintKeys(n), "uninitialized") {
		t.Fatalf("taints %s: nothing should have changed", taintKeys(n))
	}
}

// BenchmarkGetNodeAddresses is one GetNodeAddresses round trip over the unix
// socket to the real binary, answered from the sync manager's cache.
func BenchmarkGetNodeAddresses(b *testing.B) {
	dir := shortDir(b)
	file := filepath.Join(dir, "cloud.yaml")
	writeFile(b, file, staticDoc("10.0.0.1", false))
	p := start(b, "--cloud-provider", "static", "--static-file", file)
	ctx := context.Background()
	if _, err := p.client.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := p.client.GetNodeAddresses(ctx, &cloudsyncv1.GetNodeAddressesRequest{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHealthCheckBaseline is a grpc.health.v1 Check on the same socket
// and server: the floor GetNodeAddresses is compared with on a loaded machine.
func BenchmarkHealthCheckBaseline(b *testing.B) {
	p := start(b)
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := grpcclient.Check(ctx, p.cc, ""); err != nil {
			b.Fatal(err)
		}
	}
}
