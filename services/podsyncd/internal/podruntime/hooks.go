package podruntime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/microlet/microlet/services/podsyncd/internal/criexec"
	"github.com/microlet/microlet/services/podsyncd/internal/events"
)

// runHandler runs a lifecycle hook: exec through the CRI's ExecSync, an HTTP
// GET against the pod, or a sleep. It returns a message for the event/status.
func (m *Manager) runHandler(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID string, h *corev1.LifecycleHandler, timeout time.Duration) (string, error) {
	switch {
	case h.Exec != nil:
		res, err := criexec.ExecSync(ctx, m.rt, containerID, h.Exec.Command, timeout)
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v", h.Exec.Command, c.Name, podRef(pod), err), err
		}
		if res.ExitCode != 0 {
			out := res.Output()
			err := fmt.Errorf("command %v exited with %d: %s", h.Exec.Command, res.ExitCode, out)
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, c.Name, podRef(pod), err, out), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := m.httpGet(ctx, pod, c, h.HTTPGet); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, podRef(pod), err), err
		}
		return "", nil
	case h.Sleep != nil:
		select {
		case <-ctx.Done():
		case <-m.opts.Clock.After(time.Duration(h.Sleep.Seconds) * time.Second):
		}
		return "", nil
	case h.TCPSocket != nil:
		return "", fmt.Errorf("tcpSocket lifecycle handlers are deprecated and not run")
	}
	return "", fmt.Errorf("lifecycle handler has no action")
}

// podIP is the address of the pod's ready sandbox, where a lifecycle
// httpGet without a host goes (upstream takes the pod's first IP and fails
// the hook without one).
func (m *Manager) podIP(ctx context.Context, pod *corev1.Pod) (string, error) {
	st, err := m.GetPodStatus(ctx, pod.UID)
	if err != nil {
		return "", fmt.Errorf("unable to get pod status, event handlers may be invalid: %w", err)
	}
	if sb := st.ReadySandbox(); sb != nil {
		if len(sb.IPs) > 0 && sb.IPs[0] != "" {
			return sb.IPs[0], nil
		}
		if sb.IP != "" {
			return sb.IP, nil
		}
	}
	return "", errors.New("failed to find networking container")
}

func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found in container %s", p.StrVal, c.Name)
}

// hookClient is the kubelet's lifecycle HTTP client: certificates are not
// verified and redirects are followed only on the same host (another host's
// redirect is the answer).
var hookClient = &http.Client{
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // lifecycle hooks do not verify, like upstream
	CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if r.URL.Hostname() != via[0].URL.Hostname() {
			return http.ErrUseLastResponse
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	},
}

// hookUserAgent is what upstream's lifecycle requests send.
const hookUserAgent = "kube-lifecycle/1.36"

// httpGet runs an httpGet hook as upstream's handler runner: the host
// defaults to the pod IP, the port may be a container port name, the path
// may carry a query, headers are sent as given (Host sets the request's
// host; User-Agent and Accept have defaults). Only a failed request fails
// the hook, whatever the status code; an HTTPS hook answered in plain HTTP
// is retried over HTTP (without Authorization) with a LifecycleHTTPFallback
// warning.
func (m *Manager) httpGet(ctx context.Context, pod *corev1.Pod, c *corev1.Container, g *corev1.HTTPGetAction) error {
	host := g.Host
	if host == "" {
		ip, err := m.podIP(ctx, pod)
		if err != nil {
			return err
		}
		host = ip
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	u, err := url.Parse(g.Path)
	if err != nil {
		u = &url.URL{Path: g.Path}
	}
	u.Scheme, u.Host = scheme, net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	hdr := http.Header{}
	for _, h := range g.HTTPHeaders {
		hdr.Add(h.Name, h.Value)
	}
	if _, ok := hdr["User-Agent"]; !ok {
		hdr.Set("User-Agent", hookUserAgent)
	}
	if _, ok := hdr["Accept"]; !ok {
		hdr.Set("Accept", "*/*")
	} else if hdr.Get("Accept") == "" {
		hdr.Del("Accept")
	}
	req.Header, req.Host = hdr, hdr.Get("Host")
	resp, err := hookClient.Do(req)
	discard(resp)
	var uerr *url.Error
	if err != nil && errors.As(err, &uerr) && strings.Contains(uerr.Err.Error(), "server gave HTTP response to HTTPS client") {
		plain := req.Clone(ctx)
		plain.URL.Scheme = "http"
		plain.Header.Del("Authorization")
		resp, perr := hookClient.Do(plain)
		discard(resp)
		if perr == nil {
			m.opts.Recorder.Event(events.PodRef(pod), corev1.EventTypeWarning, "LifecycleHTTPFallback",
				fmt.Sprintf("request to HTTPS lifecycle hook %s got HTTP response, retry with HTTP succeeded", plain.URL.Host))
			err = nil
		}
	}
	return err
}

func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	_ = resp.Body.Close()
}
