package kubeletdropin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
	"github.com/microlet/microlet/test/conformance"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// TestConformanceKubeletConfiguration starts a node from the
// KubeletConfiguration test/conformance gives the upstream kubelet, with
// the read-only port the e2e_node suite's configuration has.
func TestConformanceKubeletConfiguration(t *testing.T) {
	port, roPort := freePort(t), freePort(t)
	n := node.Start(t, node.Options{KubeletConfig: func(c node.Config) *kubeletv1beta1.KubeletConfiguration {
		return conformance.KubeletConfig(conformance.KubeletConfigInput{
			Address: "127.0.0.1", Port: port, ReadOnlyPort: roPort, ClientCAFile: c.ClientCAFile,
			RuntimeEndpoint: components.Endpoint(c.RunDir(), components.RuntimeShim),
			CgroupRoot:      node.CgroupRoot(c.Instance), CgroupDriver: "cgroupfs",
			PodLogsDir: c.LogDir(), VolumePluginDir: filepath.Join(c.Dir, "volume-plugins"),
		})
	}})
	ctx := context.Background()

	// Registered under the --hostname-override name, on the file's port.
	nd, err := n.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := int(nd.Status.DaemonEndpoints.KubeletEndpoint.Port); got != port {
		t.Errorf("Node advertises kubelet port %d, the file says %d", got, port)
	}

	// Runs a pod.
	p := n.Create(n.Pod("web", corev1.RestartPolicyAlways, "sleep 3600"))
	n.WaitPod(p.Namespace, p.Name, "ready", node.Ready)

	// Serves its API on the file's address and port, authenticating with
	// the file's client CA: /configz is the effective configuration (file,
	// then flags, then defaults).
	raw := configz(t, port, n.CP.AdminConfig())
	var cz struct {
		KC kubeletv1beta1.KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(raw, &cz); err != nil {
		t.Fatalf("/configz: %v: %s", err, raw)
	}
	if cz.KC.Port != int32(port) || cz.KC.ReadOnlyPort != int32(roPort) || cz.KC.CgroupRoot != node.CgroupRoot(n.Instance) || cz.KC.PodLogsDir != n.LogDir ||
		cz.KC.EvictionHard["memory.available"] != "100Mi" || cz.KC.MaxPods != 110 || cz.KC.SyncFrequency.Duration.String() != "1m0s" {
		t.Errorf("/configz is not the effective configuration: %s", raw)
	}

	t.Run("read-only port", func(t *testing.T) { checkReadOnlyPort(t, roPort, p) })

	// One warning line naming the set fields microlet does not implement.
	var warnings []string
	for _, l := range strings.Split(n.Out.String(), "\n") {
		if strings.Contains(l, "microlet does not implement") {
			warnings = append(warnings, l)
		}
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "fields=healthzPort,volumePluginDir") {
		t.Errorf("want one warning naming healthzPort and volumePluginDir, got %q", warnings)
	}
}

// checkReadOnlyPort: the file's readOnlyPort serves the kubelet's
// read-only paths over plain HTTP to a client without any credential, with
// real answers (the running pod p in /pods and /stats/summary), and
// refuses exec, attach, port-forward, run, logs and the other debugging
// paths with the kubelet's 405; /configz is not there. /metrics/cadvisor
// has the container's cAdvisor series.
func checkReadOnlyPort(t *testing.T, roPort int, p *corev1.Pod) {
	base := "http://127.0.0.1:" + strconv.Itoa(roPort)
	c := &http.Client{Timeout: time.Minute}
	do := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The Summary is indented, as the kubelet's.
	podRef := `"uid": "` + string(p.UID) + `"`
	for _, tc := range []struct {
		method, path string
		code         int
		inBody       string
	}{
		{http.MethodGet, "/healthz", http.StatusOK, "ok"},
		{http.MethodGet, "/healthz/syncloop", http.StatusOK, "ok"},
		{http.MethodGet, "/pods", http.StatusOK, `"uid":"` + string(p.UID) + `"`},
		{http.MethodGet, "/stats/summary", http.StatusOK, podRef},
		{http.MethodGet, "/metrics/resource", http.StatusOK, `container_start_time_seconds{container="main",namespace="` + p.Namespace + `",pod="` + p.Name + `"}`},
		{http.MethodGet, "/metrics", http.StatusOK, "kubelet_running_pods"},
		{http.MethodGet, "/metrics/probes", http.StatusOK, "process_start_time_seconds"},
		{http.MethodPost, "/exec/" + p.Namespace + "/" + p.Name + "/main?command=id&output=1", http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{http.MethodPost, "/attach/" + p.Namespace + "/" + p.Name + "/main", http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{http.MethodPost, "/portForward/" + p.Namespace + "/" + p.Name, http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{http.MethodPost, "/run/" + p.Namespace + "/" + p.Name + "/main?cmd=id", http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{http.MethodGet, "/containerLogs/" + p.Namespace + "/" + p.Name + "/main", http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{http.MethodGet, "/runningpods/", http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{http.MethodGet, "/debug/pprof/", http.StatusMethodNotAllowed, "Debug endpoints are disabled."},
		{http.MethodGet, "/configz", http.StatusNotFound, ""},
	} {
		code, body := do(tc.method, tc.path)
		if code != tc.code || !strings.Contains(body, tc.inBody) {
			t.Errorf("read-only %s %s: %d %.300q, want %d with %q", tc.method, tc.path, code, body, tc.code, tc.inBody)
		}
	}
	// cAdvisor's container series for the running container, read from
	// its cgroups.
	_, cad := do(http.MethodGet, "/metrics/cadvisor")
	for _, series := range []string{"container_cpu_usage_seconds_total", "container_memory_working_set_bytes", "container_memory_rss",
		"container_spec_cpu_period", "container_spec_memory_limit_bytes", "container_processes", "container_threads",
		"container_file_descriptors", "container_ulimits_soft", "container_last_seen", "container_start_time_seconds"} {
		found := false
		for l := range strings.SplitSeq(cad, "\n") {
			if strings.HasPrefix(l, series+`{container="main",`) && strings.Contains(l, `pod="`+p.Name+`"`) {
				found = true
			}
		}
		if !found {
			t.Errorf("/metrics/cadvisor has no %s for %s/%s", series, p.Namespace, p.Name)
		}
	}
	if t.Failed() {
		t.Logf("/metrics/cadvisor:\n%s", cad)
	}
	// The counts carry the kubelet's server_type for this port.
	if _, body := do(http.MethodGet, "/metrics"); !strings.Contains(body, `microlet_nodeapi_http_requests_total{long_running="false",method="GET",path="healthz",server_type="readonly"}`) {
		t.Errorf("/metrics does not count the read-only port's requests as server_type readonly")
	}
}

// configz GETs /configz from the kubelet API on 127.0.0.1:port with the
// admin's client certificate (signed by the cluster CA, the file's
// clientCAFile).
func configz(t *testing.T, port int, cfg *rest.Config) []byte {
	t.Helper()
	pair, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	//nolint:gosec // nodeapi's certificate is self-signed, as a kubelet's
	tlsCfg := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	resp, err := c.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/configz")
	if err != nil {
		t.Fatalf("/configz: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/configz: %d %s", resp.StatusCode, b)
	}
	return b
}

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }
