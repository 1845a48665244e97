package upstream

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/kubernetes/pkg/probe"
	execprobe "k8s.io/kubernetes/pkg/probe/exec"
	grpcprobe "k8s.io/kubernetes/pkg/probe/grpc"
	httpprobe "k8s.io/kubernetes/pkg/probe/http"
	tcpprobe "k8s.io/kubernetes/pkg/probe/tcp"
	"k8s.io/kubernetes/third_party/forked/golang/expansion"
	utilexec "k8s.io/utils/exec"

	"github.com/microlet/microlet/services/podsyncd/internal/prober"
)

// outcome is what one probe run gave: the result's name (the kubelet's
// probe.Result strings, which prober.Result's String matches), the message
// and the error.
type outcome struct {
	result, message, err string
}

func (o outcome) String() string {
	return fmt.Sprintf("%s %q error %q", o.result, o.message, o.err)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ours runs microlet's probe.
func ours(rt criapi.RuntimeService, p *corev1.Probe, c *corev1.Container, podIP string) outcome {
	r, msg, err := prober.Run(context.Background(), rt, p, prober.Target{Pod: &corev1.Pod{}, Container: c, ContainerID: "c1", PodIP: podIP})
	return outcome{r.String(), msg, errString(err)}
}

// theirs runs the kubelet's probers as its prober.runProbe
// (pkg/kubelet/prober/prober.go) dispatches to them: the request or port is
// built first and an error there is an unknown result; the exec command is
// expanded from the container's literal env values and run through the
// runtime's ExecSync, stdout then stderr, as RunInContainer does.
func theirs(rt criapi.RuntimeService, p *corev1.Probe, c *corev1.Container, podIP string) outcome {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	var (
		r   probe.Result
		msg string
		err error
	)
	switch {
	case p.Exec != nil:
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		var cmd []string
		for _, arg := range p.Exec.Command {
			cmd = append(cmd, expansion.Expand(arg, expansion.MappingFuncFor(env)))
		}
		r, msg, err = execprobe.New().Probe(&execInContainer{run: func() ([]byte, error) {
			stdout, stderr, err := rt.ExecSync(context.Background(), "c1", cmd, timeout)
			return append(stdout, stderr...), err
		}})
	case p.HTTPGet != nil:
		req, rerr := httpprobe.NewRequestForHTTPGetAction(p.HTTPGet, c, podIP, "probe")
		if rerr != nil {
			r, err = probe.Unknown, rerr
			break
		}
		r, msg, err = httpprobe.New(false).Probe(req, timeout)
	case p.TCPSocket != nil:
		port, perr := probe.ResolveContainerPort(p.TCPSocket.Port, c)
		if perr != nil {
			r, err = probe.Unknown, perr
			break
		}
		host := p.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		r, msg, err = tcpprobe.New().Probe(host, port, timeout)
	case p.GRPC != nil:
		service := ""
		if p.GRPC.Service != nil {
			service = *p.GRPC.Service
		}
		r, msg, err = grpcprobe.New().Probe(podIP, service, int(p.GRPC.Port), timeout)
	}
	return outcome{string(r), msg, errString(err)}
}

// execInContainer is the exec.Cmd the kubelet hands its exec prober: the
// whole command runs on Start and its output goes to the one writer.
type execInContainer struct {
	run    func() ([]byte, error)
	writer io.Writer
}

var _ utilexec.Cmd = &execInContainer{}

func (e *execInContainer) Start() error {
	data, err := e.run()
	if e.writer != nil {
		_, _ = e.writer.Write(data)
	}
	return err
}
func (e *execInContainer) Run() error                      { return nil }
func (e *execInContainer) Wait() error                     { return nil }
func (e *execInContainer) Stop()                           {}
func (e *execInContainer) CombinedOutput() ([]byte, error) { return e.run() }
func (e *execInContainer) Output() ([]byte, error)         { return nil, fmt.Errorf("unimplemented") }
func (e *execInContainer) SetDir(string)                   {}
func (e *execInContainer) SetStdin(io.Reader)              {}
func (e *execInContainer) SetStdout(w io.Writer)           { e.writer = w }
func (e *execInContainer) SetStderr(w io.Writer)           { e.writer = w }
func (e *execInContainer) SetEnv([]string)                 {}
func (e *execInContainer) StdoutPipe() (io.ReadCloser, error) {
	return nil, fmt.Errorf("unimplemented")
}
func (e *execInContainer) StderrPipe() (io.ReadCloser, error) {
	return nil, fmt.Errorf("unimplemented")
}

// compare runs the probe both ways and fails the test when they differ.
func compare(t *testing.T, rt criapi.RuntimeService, p *corev1.Probe, c *corev1.Container, podIP string) outcome {
	t.Helper()
	want := theirs(rt, p, c, podIP)
	got := ours(rt, p, c, podIP)
	if got != want {
		t.Errorf("microlet: %s\nkubelet:  %s", got, want)
	}
	t.Logf("kubelet: %s", want)
	return want
}

func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return h, n
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port := hostPort(t, lis.Addr().String())
	_ = lis.Close()
	return port
}

// echoHeaders writes the request's host and headers, sorted, without
// User-Agent: the kubelet's carries the version its binary was built with
// (none in a test binary), ours the pinned minor.
func echoHeaders(w http.ResponseWriter, r *http.Request) {
	var lines []string
	for k, v := range r.Header {
		if k != "User-Agent" {
			lines = append(lines, fmt.Sprintf("%s=%q", k, v))
		}
	}
	sort.Strings(lines)
	fmt.Fprintf(w, "host=%s uri=%s\n%s\n", r.Host, r.RequestURI, strings.Join(lines, "\n"))
}

func TestHTTPProbeMatchesKubelet(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "fine") })
	mux.HandleFunc("/headers", echoHeaders)
	mux.HandleFunc("/unavailable", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, "not yet")
	})
	mux.HandleFunc("/created", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux.HandleFunc("/info", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusSwitchingProtocols) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, strings.Repeat("0123456789", 2<<10)) })
	mux.HandleFunc("/local", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://192.0.2.1/elsewhere", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/away-blank", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "http://192.0.2.1/")
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/slow", func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(mux)
	defer tlsSrv.Close()
	ip, port := hostPort(t, srv.Listener.Addr().String())
	_, tlsPort := hostPort(t, tlsSrv.Listener.Addr().String())
	c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}, {Name: "https", ContainerPort: int32(tlsPort)}}}
	named := intstr.FromString("http")
	for _, tc := range []struct {
		name string
		get  corev1.HTTPGetAction
		// want is the kubelet's result, so that every kind is covered.
		want string
	}{
		{"200 with a body", corev1.HTTPGetAction{Path: "/ok", Port: named}, "success"},
		{"201", corev1.HTTPGetAction{Path: "/created", Port: named}, "success"},
		{"101", corev1.HTTPGetAction{Path: "/info", Port: named}, "failure"},
		{"503", corev1.HTTPGetAction{Path: "/unavailable", Port: named}, "failure"},
		{"404", corev1.HTTPGetAction{Path: "/missing", Port: named}, "failure"},
		{"body cut at 10 KiB", corev1.HTTPGetAction{Path: "/big", Port: named}, "success"},
		{"redirect on the same host is followed", corev1.HTTPGetAction{Path: "/local", Port: named}, "success"},
		{"redirect loop", corev1.HTTPGetAction{Path: "/loop", Port: named}, "failure"},
		{"redirect to another host warns", corev1.HTTPGetAction{Path: "/away", Port: named}, "warning"},
		{"redirect without a body warns", corev1.HTTPGetAction{Path: "/away-blank", Port: named}, "warning"},
		{"timeout", corev1.HTTPGetAction{Path: "/slow", Port: named}, "failure"},
		{"nothing listening", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(closedPort(t)))}, "failure"},
		{"https, certificate not verified", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("https"), Scheme: corev1.URISchemeHTTPS}, "success"},
		{"http to an https port", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("https")}, "failure"},
		{"port number in a string", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString(strconv.Itoa(port))}, "success"},
		{"unknown port name", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("nope")}, "unknown"},
		{"port 0", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(0)}, "unknown"},
		{"default headers, query and escaped path", corev1.HTTPGetAction{Path: "/headers?a=1&b=%2F", Port: named}, "success"},
		{"given headers", corev1.HTTPGetAction{Path: "/headers", Port: named, HTTPHeaders: []corev1.HTTPHeader{
			{Name: "Accept", Value: "application/json"}, {Name: "X-Twice", Value: "1"}, {Name: "X-Twice", Value: "2"}, {Name: "Host", Value: "example.test"},
		}}, "success"},
		{"empty Accept", corev1.HTTPGetAction{Path: "/headers", Port: named, HTTPHeaders: []corev1.HTTPHeader{{Name: "Accept", Value: ""}}}, "success"},
		{"explicit host", corev1.HTTPGetAction{Path: "/headers", Port: named, Host: "127.0.0.1"}, "success"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &tc.get}, TimeoutSeconds: 1}
			if got := compare(t, nil, p, c, ip); got.result != tc.want {
				t.Errorf("kubelet's result %s, the case expects %s", got, tc.want)
			}
		})
	}
}

func TestTCPProbeMatchesKubelet(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	ip, port := hostPort(t, lis.Addr().String())
	c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "svc", ContainerPort: int32(port)}}}
	for _, tc := range []struct {
		name string
		tcp  corev1.TCPSocketAction
		want string
	}{
		{"open", corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}, "success"},
		{"open by name", corev1.TCPSocketAction{Port: intstr.FromString("svc")}, "success"},
		{"explicit host", corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port)), Host: "127.0.0.1"}, "success"},
		{"nothing listening", corev1.TCPSocketAction{Port: intstr.FromInt32(int32(closedPort(t)))}, "failure"},
		{"unknown port name", corev1.TCPSocketAction{Port: intstr.FromString("nope")}, "unknown"},
		{"port out of range", corev1.TCPSocketAction{Port: intstr.FromInt32(70000)}, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &tc.tcp}, TimeoutSeconds: 1}
			if got := compare(t, nil, p, c, ip); got.result != tc.want {
				t.Errorf("kubelet's result %s, the case expects %s", got, tc.want)
			}
		})
	}
}

// stuckHealth answers Check only when the call's deadline passes.
type stuckHealth struct {
	healthpb.UnimplementedHealthServer
}

func (stuckHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	<-ctx.Done()
	return nil, status.Error(codes.DeadlineExceeded, "too late")
}

// failingHealth answers Check with an error of its own.
type failingHealth struct {
	healthpb.UnimplementedHealthServer
}

func (failingHealth) Check(context.Context, *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	return nil, status.Error(codes.Internal, "broken")
}

func serveGRPC(t *testing.T, register func(*grpc.Server)) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	_, port := hostPort(t, lis.Addr().String())
	return port
}

func TestGRPCProbeMatchesKubelet(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus("unknown", healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
	healthy := serveGRPC(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, hs) })
	bare := serveGRPC(t, func(*grpc.Server) {})
	stuck := serveGRPC(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, stuckHealth{}) })
	failing := serveGRPC(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, failingHealth{}) })
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name    string
		port    int
		service *string
		want    string
	}{
		{"serving", healthy, nil, "success"},
		{"not serving", healthy, str("down"), "failure"},
		{"service unknown status", healthy, str("unknown"), "failure"},
		{"no such service", healthy, str("nope"), "failure"},
		{"no health service", bare, nil, "failure"},
		{"health rpc times out", stuck, nil, "failure"},
		{"health rpc fails", failing, nil, "failure"},
		{"nothing listening", closedPort(t), nil, "failure"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(tc.port), Service: tc.service}}, TimeoutSeconds: 1}
			if got := compare(t, nil, p, &corev1.Container{Name: "app"}, "127.0.0.1"); got.result != tc.want {
				t.Errorf("kubelet's result %s, the case expects %s", got, tc.want)
			}
		})
	}
}

// runtime answers ExecSync by the command's first word and records the
// commands it ran.
type runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	mu   sync.Mutex
	cmds [][]string
}

func (r *runtime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "test", RuntimeVersion: "1", RuntimeApiVersion: "v1"}, nil
}

func (r *runtime) ExecSync(_ context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	r.mu.Lock()
	r.cmds = append(r.cmds, req.Cmd)
	r.mu.Unlock()
	switch req.Cmd[0] {
	case "ok":
		return &runtimeapi.ExecSyncResponse{Stdout: []byte("all good\n")}, nil
	case "fail":
		return &runtimeapi.ExecSyncResponse{ExitCode: 3, Stdout: []byte("out\n"), Stderr: []byte("err\n")}, nil
	case "silent":
		return &runtimeapi.ExecSyncResponse{ExitCode: 1}, nil
	case "big":
		return &runtimeapi.ExecSyncResponse{ExitCode: 1, Stdout: []byte(strings.Repeat("o", 8<<10)), Stderr: []byte(strings.Repeat("e", 8<<10))}, nil
	case "slow":
		return nil, status.Error(codes.DeadlineExceeded, "command timed out in the runtime")
	}
	return nil, status.Errorf(codes.NotFound, "container %q not found", req.ContainerId)
}

func (r *runtime) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cmds[len(r.cmds)-1]
}

func TestExecProbeMatchesKubelet(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rt.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fake := &runtime{}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, fake)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	rt, err := remote.NewRemoteRuntimeService(context.Background(), "unix://"+sock, 10*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rt.Close(context.Background()) }()
	c := &corev1.Container{Name: "app", Env: []corev1.EnvVar{
		{Name: "FILE", Value: "/tmp/ready"}, {Name: "REF", Value: "$(FILE)"},
		{Name: "SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "k"}}},
	}}
	for _, tc := range []struct {
		name string
		cmd  []string
		want string
	}{
		{"exit 0", []string{"ok"}, "success"},
		{"exit 3 with output", []string{"fail"}, "failure"},
		{"exit 1 silent", []string{"silent"}, "failure"},
		{"output cut at 10 KiB", []string{"big"}, "failure"},
		{"timeout", []string{"slow", "10"}, "failure"},
		{"runtime error", []string{"gone"}, "unknown"},
		{"$(VAR) from literal values only", []string{"ok", "$(FILE)", "$(REF)", "$(SECRET)", "$(MISSING)", "$$(FILE)"}, "success"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: tc.cmd}}, TimeoutSeconds: 1}
			want := theirs(rt, p, c, "")
			theirCmd := fake.last()
			got := ours(rt, p, c, "")
			if got != want {
				t.Errorf("microlet: %s\nkubelet:  %s", got, want)
			}
			t.Logf("kubelet: %s, ran %q", want, theirCmd)
			if ourCmd := fake.last(); strings.Join(ourCmd, "\x00") != strings.Join(theirCmd, "\x00") {
				t.Errorf("command run: microlet %q, kubelet %q", ourCmd, theirCmd)
			}
			if want.result != tc.want {
				t.Errorf("kubelet's result %s, the case expects %s", want, tc.want)
			}
		})
	}
}

// TestResolvePortMatchesKubelet: the port a probe names, and the error
// when it names none, are probe.ResolveContainerPort's.
func TestResolvePortMatchesKubelet(t *testing.T) {
	c := &corev1.Container{Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}, {Name: "zero", ContainerPort: 0}}}
	for _, p := range []intstr.IntOrString{
		intstr.FromInt32(80), intstr.FromInt32(0), intstr.FromInt32(-1), intstr.FromInt32(65535), intstr.FromInt32(65536),
		intstr.FromString("web"), intstr.FromString("8081"), intstr.FromString("nope"), intstr.FromString("0"), intstr.FromString("zero"), intstr.FromString(""),
	} {
		want, werr := probe.ResolveContainerPort(p, c)
		got, gerr := prober.ResolvePort(p, c)
		if errString(gerr) != errString(werr) || (werr == nil && got != want) {
			t.Errorf("%s: microlet %d %v, kubelet %d %v", p.String(), got, gerr, want, werr)
		}
	}
}
