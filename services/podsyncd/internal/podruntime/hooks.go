package podruntime

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runHandler runs a lifecycle hook: exec through the CRI's ExecSync, an HTTP
// GET against the pod, or a sleep. It returns a message for the event/status.
func (m *Manager) runHandler(ctx context.Context, pod *corev1.Pod, c *corev1.Container, containerID string, h *corev1.LifecycleHandler, timeout time.Duration) (string, error) {
	switch {
	case h.Exec != nil:
		secs := int64(timeout.Seconds())
		resp, err := m.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: containerID, Cmd: h.Exec.Command, Timeout: secs})
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v", h.Exec.Command, c.Name, podRef(pod), err), err
		}
		if resp.ExitCode != 0 {
			out := string(resp.Stdout) + string(resp.Stderr)
			err := fmt.Errorf("command %v exited with %d: %s", h.Exec.Command, resp.ExitCode, out)
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

func (m *Manager) podIP(ctx context.Context, pod *corev1.Pod) string {
	st, err := m.GetPodStatus(ctx, pod.UID)
	if err == nil {
		if sb := st.ReadySandbox(); sb != nil && sb.IP != "" {
			return sb.IP
		}
	}
	return "127.0.0.1"
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

func (m *Manager) httpGet(ctx context.Context, pod *corev1.Pod, c *corev1.Container, g *corev1.HTTPGetAction) error {
	host := g.Host
	if host == "" {
		host = m.podIP(ctx, pod)
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: g.Path}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 10<<10))
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}
