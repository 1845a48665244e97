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
// KubeletConfiguration test/conformance gives the upstream kubelet.
func TestConformanceKubeletConfiguration(t *testing.T) {
	port := freePort(t)
	n := node.Start(t, node.Options{KubeletConfig: func(c node.Config) *kubeletv1beta1.KubeletConfiguration {
		return conformance.KubeletConfig(conformance.KubeletConfigInput{
			Address: "127.0.0.1", Port: port, ClientCAFile: c.ClientCAFile,
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
	if cz.KC.Port != int32(port) || cz.KC.CgroupRoot != node.CgroupRoot(n.Instance) || cz.KC.PodLogsDir != n.LogDir ||
		cz.KC.EvictionHard["memory.available"] != "100Mi" || cz.KC.MaxPods != 110 || cz.KC.SyncFrequency.Duration.String() != "1m0s" {
		t.Errorf("/configz is not the effective configuration: %s", raw)
	}

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
