package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	remote "k8s.io/cri-client/pkg"
	utilio "k8s.io/utils/io"

	"github.com/microlet/microlet/services/podsyncd/internal/criexec"
	"github.com/microlet/microlet/services/podsyncd/internal/envvars"
)

// Result is the outcome of one probe run.
type Result int

// Results of a probe. Unknown is a worker's state before its first verdict
// and a run that could not be judged (Run then also returns the error).
// Warning is a success the kubelet reports with a ProbeWarning event (an
// HTTP probe whose redirect to another host was not followed); it never
// becomes a verdict.
const (
	Unknown Result = iota
	Success
	Failure
	Warning
)

// String is the result's name in the kubelet's events ("... resulted in
// unknown state").
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

// maxOutput is how much of an exec probe's output or an HTTP probe's
// response body is kept, as in the kubelet.
const maxOutput = 10 << 10

// Run runs one probe once. It returns the result with the kubelet's message
// for it: an exec probe's output, an HTTP client's error, "HTTP probe failed
// with statuscode: N", a dialer's error, a gRPC health check's verdict. An
// error means the probe could not be run at all (a port that does not
// resolve, a runtime that failed the exec); the kubelet retries such a run
// and then reports that it errored, without a verdict. The timeout is the
// probe's timeoutSeconds.
func Run(ctx context.Context, rt criexec.Execer, p *corev1.Probe, t Target) (Result, string, error) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout <= 0 {
		timeout = time.Second
	}
	switch {
	case p.Exec != nil:
		return execProbe(ctx, rt, p.Exec, t, timeout)
	case p.HTTPGet != nil:
		return httpGet(ctx, p.HTTPGet, t, timeout)
	case p.TCPSocket != nil:
		return tcpSocket(ctx, p.TCPSocket, t, timeout)
	case p.GRPC != nil:
		return grpcHealth(ctx, p.GRPC, t, timeout)
	}
	return Unknown, "", fmt.Errorf("missing probe handler for %s_%s(%s):%s", t.Pod.Name, t.Pod.Namespace, t.Pod.UID, t.Container.Name)
}

// execProbe runs the command in the container, its $(VAR) references
// expanded from the container's literal env values only (the kubelet does
// not resolve valueFrom for probes). A non-zero exit fails with the
// command's output; a timeout fails with the runtime's error.
func execProbe(ctx context.Context, rt criexec.Execer, e *corev1.ExecAction, t Target, timeout time.Duration) (Result, string, error) {
	vals := make(map[string]string, len(t.Container.Env))
	for _, ev := range t.Container.Env {
		vals[ev.Name] = ev.Value
	}
	cmd := make([]string, len(e.Command))
	for i, arg := range e.Command {
		cmd[i] = envvars.Expand(arg, vals)
	}
	res, err := criexec.ExecSync(ctx, rt, t.ContainerID, cmd, timeout)
	switch {
	case errors.Is(err, remote.ErrCommandTimedOut):
		return Failure, err.Error(), nil
	case err != nil:
		return Unknown, "", err
	}
	out := res.Output()
	if len(out) > maxOutput {
		out = out[:maxOutput]
	}
	if res.ExitCode != 0 {
		return Failure, out, nil
	}
	return Success, out, nil
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

// ResolvePort turns a probe's port (a number, a container port's name, or
// a number written as a string) into a number; the errors are the kubelet's.
func ResolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	port := p.IntValue()
	if p.Type == intstr.String {
		port = -1
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				port = int(cp.ContainerPort)
				break
			}
		}
		if port < 0 {
			n, err := strconv.Atoi(p.StrVal)
			if err != nil {
				return 0, err
			}
			port = n
		}
	}
	if port <= 0 || port > 65535 {
		return 0, fmt.Errorf("invalid port number: %d", port)
	}
	return port, nil
}

// dialer sets SO_LINGER to one second on every probe connection, as the
// kubelet's does, so that frequent probes close with a reset instead of
// filling the node with sockets in TIME_WAIT.
func dialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 1})
		})
	}}
}

// transport skips certificate checks and proxies, asks for no compression
// and keeps no idle connections (a probe never reuses a dead container's
// socket), as the kubelet's HTTP prober does.
var transport = utilnet.SetTransportDefaults(&http.Transport{
	TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, like upstream
	DisableKeepAlives:  true,
	DisableCompression: true,
	Proxy:              http.ProxyURL(nil),
	DialContext:        dialer().DialContext,
})

// redirect follows redirects on the probed host only; for another host
// the redirect itself is the answer, as in the kubelet.
func redirect(r *http.Request, via []*http.Request) error {
	if r.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// httpRequest builds the kubelet's probe request: the path may carry a
// query, headers keep every value given, and User-Agent and Accept are
// the kubelet's unless the probe sets them (an empty Accept sends none).
func httpRequest(ctx context.Context, g *corev1.HTTPGetAction, t Target) (*http.Request, error) {
	port, err := ResolvePort(g.Port, t.Container)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(g.Path)
	if err != nil {
		u = &url.URL{Path: g.Path}
	}
	u.Scheme = strings.ToLower(string(g.Scheme))
	if u.Scheme == "" {
		u.Scheme = "http"
	}
	u.Host = net.JoinHostPort(host(g.Host, t), strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	for _, hd := range g.HTTPHeaders {
		req.Header.Add(hd.Name, hd.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header.Set("User-Agent", "kube-probe/1.36")
	}
	if v, ok := req.Header["Accept"]; !ok {
		req.Header.Set("Accept", "*/*")
	} else if len(v) == 0 || v[0] == "" {
		req.Header.Del("Accept")
	}
	req.Host = req.Header.Get("Host")
	return req, nil
}

// httpGet runs an HTTP probe. A response from 200 to 399 is a success; a
// redirect to another host is not followed (its 3xx answer is then the
// last response) and comes back as a warning naming the response body,
// which the kubelet reports in a ProbeWarning event. A failed request
// fails with the client's error, which names the URL.
func httpGet(ctx context.Context, g *corev1.HTTPGetAction, t Target, timeout time.Duration) (Result, string, error) {
	req, err := httpRequest(ctx, g, t)
	if err != nil {
		return Unknown, "", err
	}
	client := &http.Client{Timeout: timeout, Transport: transport, CheckRedirect: redirect}
	resp, err := client.Do(req)
	if err != nil {
		return Failure, err.Error(), nil
	}
	defer resp.Body.Close()
	b, err := utilio.ReadAtMost(resp.Body, maxOutput)
	if err != nil && !errors.Is(err, utilio.ErrLimitReached) {
		return Failure, "", err
	}
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
		return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", resp.StatusCode), nil
	}
	if resp.StatusCode >= http.StatusMultipleChoices {
		return Warning, "Probe terminated redirects, Response body: " + string(b), nil
	}
	return Success, string(b), nil
}

// tcpSocket succeeds when a connection opens; it fails with the dialer's
// error.
func tcpSocket(ctx context.Context, s *corev1.TCPSocketAction, t Target, timeout time.Duration) (Result, string, error) {
	port, err := ResolvePort(s.Port, t.Container)
	if err != nil {
		return Unknown, "", err
	}
	d := dialer()
	d.Timeout = timeout
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host(s.Host, t), strconv.Itoa(port)))
	if err != nil {
		return Failure, err.Error(), nil
	}
	_ = conn.Close()
	return Success, "", nil
}

// grpcHealth asks the pod's grpc.health.v1 service. Like the kubelet it
// waits for the connection within the timeout, and its failure messages
// are the kubelet's.
func grpcHealth(ctx context.Context, g *corev1.GRPCAction, t Target, timeout time.Duration) (Result, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort(host("", t), strconv.Itoa(int(g.Port)))
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent("kube-probe/1.36"),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			return dialer().DialContext(ctx, "tcp", a)
		}))
	if err != nil {
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	defer cc.Close()
	if err := waitReady(ctx, cc); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, timeout, err), nil
		}
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	service := ""
	if g.Service != nil {
		service = *g.Service
	}
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		if st, ok := status.FromError(err); ok {
			switch st.Code() {
			case codes.Unimplemented:
				return Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): " + st.Message(), nil
			case codes.DeadlineExceeded:
				return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", timeout), nil
			}
		}
		return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", err), nil
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", resp.GetStatus().String()), nil
	}
	return Success, "service healthy", nil
}

// waitReady connects cc and waits until it is ready or ctx ends (then it
// returns ctx's error), which is what a blocking dial did.
func waitReady(ctx context.Context, cc *grpc.ClientConn) error {
	for {
		cc.Connect()
		s := cc.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}
