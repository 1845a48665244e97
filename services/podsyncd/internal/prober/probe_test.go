package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	remote "k8s.io/cri-client/pkg"
	utilexec "k8s.io/utils/exec"
)

func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

func TestHTTPGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/ok" && r.Header.Get("X-Test") == "yes" && r.Host == "example.test":
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		case r.URL.Path == "/away":
			http.Redirect(w, r, "http://192.0.2.1/", http.StatusFound)
		case r.URL.Path == "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ip, port := hostPort(t, srv.Listener.Addr().String())
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	okHeaders := []corev1.HTTPHeader{{Name: "X-Test", Value: "yes"}, {Name: "Host", Value: "example.test"}}
	base := "http://" + net.JoinHostPort(ip, strconv.Itoa(port))
	for _, tc := range []struct {
		name string
		get  corev1.HTTPGetAction
		want Result
		// msg is the kubelet's message (pkg/probe/http), "" to skip.
		msg string
	}{
		{"port by name with headers and host header", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("web"), HTTPHeaders: okHeaders}, Success, ""},
		{"port by number", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port)), HTTPHeaders: okHeaders}, Success, ""},
		{"port number as a string", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString(strconv.Itoa(port)), HTTPHeaders: okHeaders}, Success, ""},
		{"same-host redirect is followed", corev1.HTTPGetAction{Path: "/redirect", Port: intstr.FromString("web"), HTTPHeaders: okHeaders}, Success, ""},
		{"missing header fails", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("web")}, Failure, "HTTP probe failed with statuscode: 503"},
		{"503 fails", corev1.HTTPGetAction{Path: "/nope", Port: intstr.FromString("web")}, Failure, "HTTP probe failed with statuscode: 503"},
		{"redirect to another host is not followed and warns", corev1.HTTPGetAction{Path: "/away", Port: intstr.FromString("web")}, Warning,
			"Probe terminated redirects, Response body: <a href=\"http://192.0.2.1/\">Found</a>.\n\n"},
		{"timeout is the client's, naming the URL once", corev1.HTTPGetAction{Path: "/slow", Port: intstr.FromString("web")}, Failure,
			`Get "` + base + `/slow": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &tc.get}, TimeoutSeconds: 1}
			got, msg, err := Run(context.Background(), nil, p, Target{Pod: &corev1.Pod{}, Container: c, PodIP: ip})
			if got != tc.want || err != nil {
				t.Fatalf("got %s (%s, %v), want %s", got, msg, err, tc.want)
			}
			if tc.msg != "" && msg != tc.msg {
				t.Fatalf("message %q, want %q", msg, tc.msg)
			}
		})
	}
	// A port that does not resolve is no verdict but an error, which the
	// kubelet reports as "errored" (probe.ResolveContainerPort's words).
	p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("nope")}}}
	if got, _, err := Run(context.Background(), nil, p, Target{Pod: &corev1.Pod{}, Container: c, PodIP: ip}); got != Unknown || err == nil ||
		err.Error() != `strconv.Atoi: parsing "nope": invalid syntax` {
		t.Fatalf("unknown port name: %s %v", got, err)
	}
}

// TestHTTPRequest: the request carries the kubelet's defaults unless the
// probe sets the header, every value of a repeated header, and the path's
// query and escaping.
func TestHTTPRequest(t *testing.T) {
	c := &corev1.Container{}
	for _, tc := range []struct {
		name      string
		headers   []corev1.HTTPHeader
		path      string
		url       string
		ua        string
		accept    []string
		multiples []string
	}{
		{"defaults", nil, "/healthz?x=1", "http://10.0.0.2:8080/healthz?x=1", "kube-probe/1.36", []string{"*/*"}, nil},
		{"own user agent and accept", []corev1.HTTPHeader{{Name: "User-Agent", Value: "mine"}, {Name: "Accept", Value: "text/plain"}}, "/", "http://10.0.0.2:8080/", "mine", []string{"text/plain"}, nil},
		{"empty accept sends none", []corev1.HTTPHeader{{Name: "Accept", Value: ""}}, "/a%2Fb", "http://10.0.0.2:8080/a%2Fb", "kube-probe/1.36", nil, nil},
		{"repeated header keeps both", []corev1.HTTPHeader{{Name: "X-A", Value: "1"}, {Name: "X-A", Value: "2"}}, "", "http://10.0.0.2:8080", "kube-probe/1.36", []string{"*/*"}, []string{"1", "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &corev1.HTTPGetAction{Path: tc.path, Port: intstr.FromInt32(8080), HTTPHeaders: tc.headers}
			req, err := httpRequest(context.Background(), g, Target{Container: c, PodIP: "10.0.0.2"})
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.String() != tc.url || req.Header.Get("User-Agent") != tc.ua || !slices.Equal(req.Header.Values("Accept"), tc.accept) ||
				!slices.Equal(req.Header.Values("X-A"), tc.multiples) {
				t.Fatalf("url %s, headers %v", req.URL, req.Header)
			}
		})
	}
}

// fakeExec answers ExecSync as cri-client does: a non-zero exit is a
// CodeExitError, a runtime's deadline ErrCommandTimedOut.
type fakeExec struct {
	cmd    []string
	stdout string
	stderr string
	err    error
}

func (f *fakeExec) ExecSync(_ context.Context, _ string, cmd []string, _ time.Duration) ([]byte, []byte, error) {
	f.cmd = cmd
	return []byte(f.stdout), []byte(f.stderr), f.err
}

// TestExec: the message is the command's output (stdout then stderr, 10
// KiB at most) whether it passed or failed, a timeout fails with the
// runtime's error, any other runtime error is no verdict; $(VAR) in the
// command takes the container's literal env values only.
func TestExec(t *testing.T) {
	exit := func(code int) error {
		return utilexec.CodeExitError{Err: fmt.Errorf("command exited with %d", code), Code: code}
	}
	timedOut := fmt.Errorf("%w: %q timed out after %s", remote.ErrCommandTimedOut, "sleep 10", time.Second)
	long := strings.Repeat("x", 11<<10)
	for _, tc := range []struct {
		name string
		rt   fakeExec
		want Result
		msg  string
		err  bool
	}{
		{"exit 0", fakeExec{stdout: "fine\n"}, Success, "fine\n", false},
		{"exit 3 with output", fakeExec{stdout: "out", stderr: "err", err: exit(3)}, Failure, "outerr", false},
		{"exit 1 silent", fakeExec{err: exit(1)}, Failure, "", false},
		{"output cut at 10 KiB", fakeExec{stdout: long, err: exit(1)}, Failure, long[:10<<10], false},
		{"timeout", fakeExec{err: timedOut}, Failure, `command timed out: "sleep 10" timed out after 1s`, false},
		{"runtime error", fakeExec{err: errors.New("container not found")}, Unknown, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := tc.rt
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"cat", "$(FILE)", "$(FROM)", "$(NONE)"}}}}
			c := &corev1.Container{Env: []corev1.EnvVar{{Name: "FILE", Value: "/tmp/x"}, {Name: "FROM", ValueFrom: &corev1.EnvVarSource{}}}}
			got, msg, err := Run(context.Background(), &rt, p, Target{Pod: &corev1.Pod{}, Container: c, ContainerID: "c1"})
			if got != tc.want || msg != tc.msg || (err != nil) != tc.err {
				t.Fatalf("got %s %q %v, want %s %q error %v", got, msg, err, tc.want, tc.msg, tc.err)
			}
			if want := []string{"cat", "/tmp/x", "", "$(NONE)"}; !slices.Equal(rt.cmd, want) {
				t.Fatalf("command %q, want %q", rt.cmd, want)
			}
		})
	}
}

func TestNoHandler(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", UID: "u1"}}
	got, _, err := Run(context.Background(), nil, &corev1.Probe{}, Target{Pod: pod, Container: &corev1.Container{Name: "app"}})
	if got != Unknown || err == nil || err.Error() != "missing probe handler for web_ns(u1):app" {
		t.Fatalf("got %s %v", got, err)
	}
}

func TestTCPSocket(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ip, port := hostPort(t, lis.Addr().String())
	c := &corev1.Container{Name: "c"}
	p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}, TimeoutSeconds: 5}
	if got, msg, err := Run(context.Background(), nil, p, Target{Container: c, PodIP: ip}); got != Success || err != nil {
		t.Fatalf("open port: %s %s %v", got, msg, err)
	}
	_ = lis.Close()
	// The dialer's own error, as the kubelet's.
	want := fmt.Sprintf("dial tcp %s: connect: connection refused", net.JoinHostPort(ip, strconv.Itoa(port)))
	if got, msg, _ := Run(context.Background(), nil, p, Target{Container: c, PodIP: ip}); got != Failure || msg != want {
		t.Fatalf("closed port: %s %q, want %q", got, msg, want)
	}
}

// serveGRPC serves a gRPC server on loopback, with the health service
// when hs is not nil, until the test ends; it returns its host and port.
func serveGRPC(t *testing.T, hs *health.Server) (string, int) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	if hs != nil {
		healthpb.RegisterHealthServer(srv, hs)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return hostPort(t, lis.Addr().String())
}

// TestGRPC: the grpc.health.v1 verdicts and the kubelet's messages
// (pkg/probe/grpc) for each way it fails.
func TestGRPC(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	ip, port := serveGRPC(t, hs)
	_, bare := serveGRPC(t, nil)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closedPort := hostPort(t, closed.Addr().String())
	_ = closed.Close()
	down, unknown := "down", "nope"
	addr := func(p int) string { return net.JoinHostPort(ip, strconv.Itoa(p)) }
	for _, tc := range []struct {
		name    string
		port    int
		service *string
		want    Result
		msg     string
	}{
		{"overall", port, nil, Success, "service healthy"},
		{"not serving service", port, &down, Failure, `service unhealthy (responded with "NOT_SERVING")`},
		{"unknown service", port, &unknown, Failure, "error: health rpc probe failed: rpc error: code = NotFound desc = unknown service"},
		{"no health service", bare, nil, Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): unknown service grpc.health.v1.Health"},
		// Nothing listens: the connection is awaited for the whole timeout.
		{"nothing listening", closedPort, nil, Failure, fmt.Sprintf("timeout: failed to connect service %q within 1s: context deadline exceeded", addr(closedPort))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(tc.port), Service: tc.service}}, TimeoutSeconds: 1}
			got, msg, err := Run(context.Background(), nil, p, Target{Container: &corev1.Container{}, PodIP: ip})
			if got != tc.want || msg != tc.msg || err != nil {
				t.Fatalf("got %s %q %v, want %s %q", got, msg, err, tc.want, tc.msg)
			}
		})
	}
}
