package prober

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ip, port := hostPort(t, srv.Listener.Addr().String())
	c := &corev1.Container{Name: "c", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(port)}}}
	okHeaders := []corev1.HTTPHeader{{Name: "X-Test", Value: "yes"}, {Name: "Host", Value: "example.test"}}
	for _, tc := range []struct {
		name string
		get  corev1.HTTPGetAction
		want Result
	}{
		{"port by name with headers and host header", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("web"), HTTPHeaders: okHeaders}, Success},
		{"port by number", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port)), HTTPHeaders: okHeaders}, Success},
		{"missing header fails", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("web")}, Failure},
		{"503 fails", corev1.HTTPGetAction{Path: "/nope", Port: intstr.FromString("web")}, Failure},
		{"unknown port name fails", corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString("nope")}, Failure},
		{"redirect to another host is not followed and warns", corev1.HTTPGetAction{Path: "/away", Port: intstr.FromString("web")}, Warning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &tc.get}, TimeoutSeconds: 5}
			got, msg := Run(context.Background(), nil, p, Target{Pod: &corev1.Pod{}, Container: c, PodIP: ip})
			if got != tc.want {
				t.Fatalf("got %s (%s), want %s", got, msg, tc.want)
			}
			// The kubelet's ProbeWarning text names the redirect's body.
			if want := "Probe terminated redirects, Response body: <a href=\"http://192.0.2.1/\">Found</a>.\n\n"; got == Warning && msg != want {
				t.Fatalf("warning %q, want %q", msg, want)
			}
		})
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
	if got, msg := Run(context.Background(), nil, p, Target{Container: c, PodIP: ip}); got != Success {
		t.Fatalf("open port: %s %s", got, msg)
	}
	_ = lis.Close()
	if got, _ := Run(context.Background(), nil, p, Target{Container: c, PodIP: ip}); got != Failure {
		t.Fatalf("closed port: %s", got)
	}
}

func TestGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	ip, port := hostPort(t, lis.Addr().String())
	down := "down"
	for _, tc := range []struct {
		name    string
		service *string
		want    Result
	}{{"overall", nil, Success}, {"not serving service", &down, Failure}} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: int32(port), Service: tc.service}}, TimeoutSeconds: 5}
			if got, msg := Run(context.Background(), nil, p, Target{Container: &corev1.Container{}, PodIP: ip}); got != tc.want {
				t.Fatalf("got %s (%s), want %s", got, msg, tc.want)
			}
		})
	}
}
