package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/exec"

	"github.com/microlet/microlet/internal/testenv/node"
)

// TestStreamProtocols speaks both stream protocols straight to nodeapi, as
// an API server does: SPDY, and WebSocket (v5 stream-close for exec, the
// SPDY-over-WebSocket tunnel for port-forward) that nodeapi translates for
// the runtime's SPDY streaming server. kubectl through this API server only
// exercises one of them, depending on what the Node declares.
func TestStreamProtocols(t *testing.T) {
	n := node.Start(t, node.Options{})
	port := servingPort(t, n)
	p := n.Create(n.Pod("streams", corev1.RestartPolicyAlways,
		`mkdir -p /www && echo "port-forwarded" > /www/index.html && exec httpd -f -p 8080 -h /www`))
	n.WaitPod(p.Namespace, p.Name, "running", running)

	admin := n.CP.AdminConfig()
	cfg := &rest.Config{Host: "https://127.0.0.1:" + strconv.Itoa(port),
		TLSClientConfig: rest.TLSClientConfig{Insecure: true, CertData: admin.CertData, KeyData: admin.KeyData}}
	execURL := func(cmd ...string) *url.URL {
		q := url.Values{"command": cmd, "input": {"1"}, "output": {"1"}, "error": {"1"}}
		u, _ := url.Parse(cfg.Host + "/exec/default/streams/main?" + q.Encode())
		return u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, proto := range []string{"spdy", "websocket"} {
		t.Run("exec over "+proto, func(t *testing.T) {
			u := execURL("sh", "-c", "cat; echo to-err >&2; exit 4")
			var (
				ex  remotecommand.Executor
				err error
			)
			if proto == "spdy" {
				ex, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
			} else {
				ex, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
			}
			if err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("over " + proto + "\n"), Stdout: &stdout, Stderr: &stderr})
			code := -1
			if ee, ok := err.(exec.ExitError); ok {
				code = ee.ExitStatus()
			}
			if code != 4 || stdout.String() != "over "+proto+"\n" || stderr.String() != "to-err\n" {
				t.Errorf("exit %d (%v), stdout %q, stderr %q", code, err, stdout.String(), stderr.String())
			}
		})
	}

	for _, proto := range []string{"spdy", "websocket"} {
		t.Run("port-forward over "+proto, func(t *testing.T) {
			u, _ := url.Parse(cfg.Host + "/portForward/default/streams")
			var dialer streamhttp.Dialer
			if proto == "spdy" {
				tr, upgrader, err := spdy.RoundTripperFor(cfg)
				if err != nil {
					t.Fatal(err)
				}
				dialer = spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: tr}, http.MethodPost, u)
			} else {
				d, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg)
				if err != nil {
					t.Fatal(err)
				}
				dialer = d
			}
			stop, ready := make(chan struct{}), make(chan struct{})
			var out, errOut bytes.Buffer
			fw, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, &out, &errOut)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- fw.ForwardPorts() }()
			defer func() {
				close(stop)
				if err := <-done; err != nil {
					t.Logf("port-forward ended: %v", err)
				}
			}()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("port-forward ended: %v; %s", err, errOut.String())
			case <-ctx.Done():
				t.Fatal("port-forward never got ready")
			}
			ports, err := fw.GetPorts()
			if err != nil || len(ports) != 1 {
				t.Fatalf("ports %v: %v", ports, err)
			}
			resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(ports[0].Local)) + "/")
			if err != nil {
				t.Fatalf("GET through the forward: %v; %s", err, errOut.String())
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if string(body) != "port-forwarded\n" {
				t.Errorf("body %q", body)
			}
		})
	}
}
