package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv/node"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
)

// servingPort asks nodeapi's socket which port it serves.
func servingPort(t *testing.T, n *node.Node) int {
	t.Helper()
	cc, err := grpcclient.Dial(components.Endpoint(n.RunDir, components.NodeAPI))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := nodeapiv1.NewNodeAPIServiceClient(cc).GetServingInfo(ctx, &nodeapiv1.GetServingInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.GetSelfSigned() || len(info.GetCertificatePem()) == 0 {
		t.Errorf("serving info %v: want the self-signed certificate", info)
	}
	return int(info.GetPort())
}

// client is an HTTPS client of nodeapi presenting cfg's credential (a
// client certificate or a bearer token; none when cfg is nil).
type client struct {
	t     *testing.T
	base  string
	http  *http.Client
	token string
}

func newClient(t *testing.T, port int, cfg *rest.Config) client {
	tlsCfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // nodeapi's certificate is self-signed, as a kubelet's
	c := client{t: t, base: "https://127.0.0.1:" + strconv.Itoa(port)}
	if cfg != nil {
		if len(cfg.CertData) > 0 {
			pair, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
			if err != nil {
				t.Fatal(err)
			}
			tlsCfg.Certificates = []tls.Certificate{pair}
		}
		c.token = cfg.BearerToken
	}
	c.http = &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	return c
}

func (c client) do(method, path string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDirect calls nodeapi without the API server: authentication,
// authorization, and the kubelet's answers to good and bad paths.
func TestDirect(t *testing.T) {
	n := node.Start(t, node.Options{})
	port := servingPort(t, n)
	p := n.Create(n.Pod("direct", corev1.RestartPolicyAlways, `echo hello; exec sleep 3600`))
	n.WaitPod(p.Namespace, p.Name, "running", running)

	admin := newClient(t, port, n.CP.AdminConfig())
	anonymous := newClient(t, port, nil)
	other := newClient(t, port, n.CP.NodeConfig("some-other-node"))
	token := newClient(t, port, &rest.Config{BearerToken: n.CP.AdminToken()})
	badToken := newClient(t, port, &rest.Config{BearerToken: "not-a-token"})

	t.Run("authentication and authorization", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			c      client
			path   string
			code   int
			inBody string
		}{
			{"no credential", anonymous, "/pods", http.StatusUnauthorized, "Unauthorized"},
			{"no credential, healthz", anonymous, "/healthz", http.StatusUnauthorized, "Unauthorized"},
			{"unknown token", badToken, "/pods", http.StatusUnauthorized, "Unauthorized"},
			{"another node's identity", other, "/pods", http.StatusForbidden,
				"Forbidden (user=system:node:some-other-node, verb=get, resource=nodes, subresource(s)=[pods proxy])"},
			{"another node's identity, logs", other, "/containerLogs/default/direct/main", http.StatusForbidden, "subresource(s)=[proxy]"},
			{"another node's identity, stats", other, "/stats/summary", http.StatusForbidden, "subresource(s)=[stats]"},
			{"admin certificate", admin, "/healthz", http.StatusOK, "ok"},
			{"admin token through TokenReview", token, "/healthz", http.StatusOK, "ok"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, body := tc.c.do(http.MethodGet, tc.path)
				if code != tc.code || !strings.Contains(body, tc.inBody) {
					t.Errorf("GET %s: %d %q, want %d with %q", tc.path, code, body, tc.code, tc.inBody)
				}
			})
		}
	})

	t.Run("pods and runningpods", func(t *testing.T) {
		for _, path := range []string{"/pods", "/runningpods/"} {
			code, body := admin.do(http.MethodGet, path)
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", path, code, body)
			}
			var list corev1.PodList
			if err := json.Unmarshal([]byte(body), &list); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			found := false
			for _, item := range list.Items {
				if item.Name == "direct" && item.Namespace == "default" && item.UID == p.UID {
					found = true
					if path == "/pods" && item.Status.Phase != corev1.PodRunning {
						t.Errorf("/pods: phase %q, want Running (the status statusd holds)", item.Status.Phase)
					}
					if path == "/runningpods/" && (len(item.Spec.Containers) != 1 || item.Spec.Containers[0].Name != "main") {
						t.Errorf("/runningpods/: containers %+v", item.Spec.Containers)
					}
				}
			}
			if !found || list.Kind != "PodList" {
				t.Errorf("%s: kind %q, pod default/direct %s missing:\n%s", path, list.Kind, p.UID, body)
			}
		}
	})

	t.Run("configz", func(t *testing.T) {
		code, body := admin.do(http.MethodGet, "/configz")
		if code != http.StatusOK || !strings.Contains(body, `"kubeletconfig":{"kind":"KubeletConfiguration"`) {
			t.Errorf("/configz: %d %s", code, body)
		}
	})

	t.Run("bad paths get the kubelet's answers", func(t *testing.T) {
		for _, tc := range []struct {
			method, path string
			code         int
			inBody       string
		}{
			{http.MethodGet, "/containerLogs/default/nosuch/main", http.StatusNotFound, `pod "nosuch" does not exist`},
			{http.MethodGet, "/containerLogs/default/direct/nosuch", http.StatusNotFound, `container "nosuch" not found in pod "direct"`},
			{http.MethodGet, "/containerLogs/default/direct/main?tailLines=-1", http.StatusUnprocessableEntity, ""},
			{http.MethodGet, "/containerLogs/default/direct/main?tailLines=x", http.StatusBadRequest, ""},
			{http.MethodPost, "/exec/default/nosuch/main?command=true&output=1", http.StatusNotFound, "pod does not exist"},
			{http.MethodPost, "/portForward/default/nosuch", http.StatusNotFound, "pod does not exist"},
			{http.MethodGet, "/nosuch", http.StatusNotFound, ""},
		} {
			code, body := admin.do(tc.method, tc.path)
			if code != tc.code || !strings.Contains(body, tc.inBody) {
				t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, code, body, tc.code, tc.inBody)
			}
		}
		code, body := admin.do(http.MethodGet, "/containerLogs/default/direct/main")
		if code != http.StatusOK || body != "hello\n" {
			t.Errorf("logs: %d %q", code, body)
		}
	})
}
