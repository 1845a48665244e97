package prober

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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	remote "k8s.io/cri-client/pkg"

	"github.com/microlet/microlet/services/podsyncd/internal/criexec"
)

// Result is the outcome of one probe run.
type Result int

// Results of a probe; Unknown is a worker's state before its first verdict.
// Warning is a success the kubelet reports with a ProbeWarning event (an
// HTTP probe whose redirect to another host was not followed); it never
// becomes a verdict.
const (
	Unknown Result = iota
	Success
	Failure
	Warning
)

func (r Result) String() string {
	switch r {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Warning:
		return "warning"
	}
	return "unknown"
}

// Target is what a probe runs against.
type Target struct {
	Pod         *corev1.Pod
	Container   *corev1.Container
	ContainerID string
	// PodIP is the sandbox IP; probes without a host use it.
	PodIP string
}

// Run runs one probe once and returns its result with a message for the
// event when it failed or warned. The timeout is the probe's timeoutSeconds.
func Run(ctx context.Context, rt criexec.Execer, p *corev1.Probe, t Target) (Result, string) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	// The runtime times an exec out itself (the call's deadline only has
	// to bound a runtime that does not); the network probes time out here.
	netCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var (
		err     error
		warning string
	)
	switch {
	case p.Exec != nil:
		var res criexec.Result
		res, err = criexec.ExecSync(ctx, rt, t.ContainerID, p.Exec.Command, timeout)
		switch {
		case errors.Is(err, remote.ErrCommandTimedOut):
			err = fmt.Errorf("command %q timed out", p.Exec.Command)
		case err == nil && res.ExitCode != 0:
			err = fmt.Errorf("command %q exited with %d: %s", p.Exec.Command, res.ExitCode, res.Output())
		}
	case p.HTTPGet != nil:
		warning, err = httpGet(netCtx, p.HTTPGet, t)
	case p.TCPSocket != nil:
		err = tcpSocket(netCtx, p.TCPSocket, t)
	case p.GRPC != nil:
		err = grpcHealth(netCtx, p.GRPC, t)
	default:
		return Failure, "probe has no action"
	}
	if err != nil {
		return Failure, err.Error()
	}
	if warning != "" {
		return Warning, warning
	}
	return Success, ""
}

func host(h string, t Target) string {
	if h != "" {
		return h
	}
	if t.PodIP != "" {
		return t.PodIP
	}
	return "127.0.0.1"
}

// ResolvePort turns a port number or a container port name into a number.
func ResolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port number %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("port %q not found in container %s", p.StrVal, c.Name)
}

// transport skips certificate checks, as the kubelet's HTTPS probes do, and
// keeps no idle connections so a probe never reuses a dead container's socket.
var transport = &http.Transport{
	TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, like upstream
	DisableKeepAlives: true,
	Proxy:             nil,
}

// maxBody is how much of a response the HTTP probe reads, as upstream.
const maxBody = 10 << 10

// httpGet runs an HTTP probe. A response from 200 to 399 is a success; a
// redirect to another host is not followed (a 3xx answer is then the last
// response, as in the kubelet) and comes back as a warning naming the
// response body, which the kubelet reports in a ProbeWarning event.
func httpGet(ctx context.Context, g *corev1.HTTPGetAction, t Target) (warning string, err error) {
	port, err := ResolvePort(g.Port, t.Container)
	if err != nil {
		return "", err
	}
	scheme := "http"
	if g.Scheme == corev1.URISchemeHTTPS {
		scheme = "https"
	}
	h := host(g.Host, t)
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(h, strconv.Itoa(port))}
	if ref, err := url.Parse(g.Path); err == nil {
		u.Path, u.RawQuery = ref.Path, ref.RawQuery
	} else {
		u.Path = g.Path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("User-Agent", "kube-probe/1.36")
	req.Header.Set("Accept", "*/*")
	for _, hd := range g.HTTPHeaders {
		if http.CanonicalHeaderKey(hd.Name) == "Host" {
			req.Host = hd.Value
			continue
		}
		req.Header.Set(hd.Name, hd.Value)
	}
	client := &http.Client{Transport: transport, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		// Like upstream: follow redirects on the same host; for another
		// host the redirect itself is the answer.
		if r.URL.Hostname() != via[0].URL.Hostname() {
			return http.ErrUseLastResponse
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("get %q: %w", u.String(), err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
		return "", fmt.Errorf("HTTP probe failed with statuscode: %d", resp.StatusCode)
	}
	if resp.StatusCode >= http.StatusMultipleChoices {
		return "Probe terminated redirects, Response body: " + string(body), nil
	}
	return "", nil
}

func tcpSocket(ctx context.Context, s *corev1.TCPSocketAction, t Target) error {
	port, err := ResolvePort(s.Port, t.Container)
	if err != nil {
		return err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host(s.Host, t), strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return conn.Close()
}

func grpcHealth(ctx context.Context, g *corev1.GRPCAction, t Target) error {
	addr := net.JoinHostPort(host("", t), strconv.Itoa(int(g.Port)))
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithUserAgent("kube-probe/1.36"))
	if err != nil {
		return err
	}
	defer cc.Close()
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return fmt.Errorf("failed to connect service %q within %v: %w", addr, deadlineOf(ctx), err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("service unhealthy (responded with %q)", resp.Status)
	}
	return nil
}

func deadlineOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return time.Until(d).Round(time.Second)
	}
	return 0
}
