package podruntime

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	criapi "k8s.io/cri-api/pkg/apis"
)

// probeHealth is a Health with chosen startup verdicts and probe failures.
type probeHealth struct {
	started map[string]bool
	failed  map[string]bool
}

func (h probeHealth) FailedProbe(_ *corev1.Container, id string) (string, *int64, bool) {
	return "startup", nil, h.failed[id]
}

func (h probeHealth) Started(_ *corev1.Container, id string) bool { return h.started[id] }

// sidecarPod has init containers sidecar (restartable, startup probe),
// init1 (regular) and app containers a and b.
func sidecarPod() *corev1.Pod {
	p := testPod(corev1.RestartPolicyAlways, 0)
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = []corev1.Container{
		{Name: "sidecar", Image: "img", RestartPolicy: &always, StartupProbe: &corev1.Probe{}},
		{Name: "init1", Image: "img"},
	}
	return p
}

func TestComputePodActionsSidecars(t *testing.T) {
	p := sidecarPod()
	changed := p.DeepCopy()
	changed.Spec.InitContainers[0].Image = "other"
	sb := readySandbox
	tests := []struct {
		name   string
		pod    *corev1.Pod
		health probeHealth
		st     PodStatus
		want   Actions
	}{
		{"sidecar first", p, probeHealth{}, PodStatus{Sandboxes: sb},
			Actions{SandboxID: "sb", NextInit: 0, Kill: map[string]string{}}},
		{"running sidecar not started holds the next init", p, probeHealth{}, PodStatus{Sandboxes: sb, Containers: []ContainerStatus{running(p, "sidecar")}},
			Actions{SandboxID: "sb", NextInit: -1, Kill: map[string]string{}}},
		{"started sidecar lets the next init start", p, probeHealth{started: map[string]bool{"sidecar-id": true}}, PodStatus{Sandboxes: sb, Containers: []ContainerStatus{running(p, "sidecar")}},
			Actions{SandboxID: "sb", NextInit: 1, Kill: map[string]string{}}},
		{"apps start after the inits, sidecar kept", p, probeHealth{started: map[string]bool{"sidecar-id": true}},
			PodStatus{Sandboxes: sb, Containers: []ContainerStatus{exited(p, "init1", 0), running(p, "sidecar")}},
			Actions{SandboxID: "sb", NextInit: -1, Start: []int{0, 1}, Kill: map[string]string{}}},
		{"exited sidecar restarts before initialization", p, probeHealth{}, PodStatus{Sandboxes: sb, Containers: []ContainerStatus{exited(p, "sidecar", 1)}},
			Actions{SandboxID: "sb", NextInit: 0, Kill: map[string]string{}}},
		{"failed startup probe restarts the sidecar", p, probeHealth{failed: map[string]bool{"sidecar-id": true}}, PodStatus{Sandboxes: sb, Containers: []ContainerStatus{running(p, "sidecar")}},
			Actions{SandboxID: "sb", NextInit: 0, Kill: map[string]string{"sidecar-id": "Init container sidecar failed startup probe"}}},
		{"initialized pod restarts an exited sidecar beside the apps", p, probeHealth{},
			PodStatus{Sandboxes: sb, Containers: []ContainerStatus{running(p, "a"), exited(p, "b", 0), exited(p, "sidecar", 1)}},
			Actions{SandboxID: "sb", NextInit: -1, RestartSidecars: []int{0}, Start: []int{1}, Kill: map[string]string{}}},
		{"exited apps alone do not make the pod initialized", p, probeHealth{},
			PodStatus{Sandboxes: sb, Containers: []ContainerStatus{exited(p, "a", 0), exited(p, "b", 0), exited(p, "init1", 0), exited(p, "sidecar", 1)}},
			Actions{SandboxID: "sb", NextInit: 0, Kill: map[string]string{}}},
		{"initialized pod: a restarted sidecar not yet started holds nothing", p, probeHealth{},
			PodStatus{Sandboxes: sb, Containers: []ContainerStatus{running(p, "a"), running(p, "b"), running(p, "sidecar")}},
			Actions{SandboxID: "sb", NextInit: -1, Kill: map[string]string{}}},
		{"changed sidecar is replaced", changed, probeHealth{started: map[string]bool{"sidecar-id": true}},
			PodStatus{Sandboxes: sb, Containers: []ContainerStatus{running(p, "a"), running(p, "b"), running(p, "sidecar")}},
			Actions{SandboxID: "sb", NextInit: -1, RestartSidecars: []int{0}, Kill: map[string]string{"sidecar-id": "Init container sidecar definition changed"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewManager(nil, nil, Options{})
			m.SetHealth(tc.health)
			if got := m.ComputePodActions(tc.pod, &tc.st); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// stopRecorder is a runtime that records the order of StopContainer calls.
type stopRecorder struct {
	criapi.RuntimeService
	mu    sync.Mutex
	stops []string
}

func (r *stopRecorder) StopContainer(_ context.Context, id string, _ int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stops = append(r.stops, id)
	return nil
}

func (r *stopRecorder) StopPodSandbox(context.Context, string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stops = append(r.stops, "sandbox")
	return nil
}

func TestKillPodStopsSidecarsLast(t *testing.T) {
	p := sidecarPod()
	always := corev1.ContainerRestartPolicyAlways
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "sidecar2", Image: "img", RestartPolicy: &always})
	init := func(cs ContainerStatus) ContainerStatus { cs.Init = true; return cs }
	st := &PodStatus{Sandboxes: readySandbox, Containers: []ContainerStatus{
		init(running(p, "sidecar")), running(p, "a"), init(running(p, "sidecar2")), running(p, "b"),
	}}
	rt := &stopRecorder{}
	m := NewManager(rt, nil, Options{})
	if err := m.KillPod(context.Background(), p, st, nil); err != nil {
		t.Fatal(err)
	}
	if len(rt.stops) != 5 {
		t.Fatalf("stops %v", rt.stops)
	}
	apps := map[string]bool{rt.stops[0]: true, rt.stops[1]: true}
	if !apps["a-id"] || !apps["b-id"] || !reflect.DeepEqual(rt.stops[2:], []string{"sidecar2-id", "sidecar-id", "sandbox"}) {
		t.Fatalf("stop order %v, want the apps, then sidecar2, sidecar, the sandbox", rt.stops)
	}
}

func TestHTTPHook(t *testing.T) {
	type seen struct {
		uri, host, agent, accept, custom string
	}
	got := make(chan seen, 4)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.RequestURI, r.Host, r.UserAgent(), r.Header.Get("Accept"), r.Header.Get("X-Custom")}
		w.WriteHeader(http.StatusInternalServerError) // the status does not fail a hook
	})
	plain := httptest.NewServer(handler)
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(handler)
	defer tlsSrv.Close()
	portOf := func(s *httptest.Server) int {
		u, _ := url.Parse(s.URL)
		n, _ := strconv.Atoi(u.Port())
		return n
	}
	c := &corev1.Container{Name: "app", Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: int32(portOf(plain))}}}
	pod := testPod(corev1.RestartPolicyAlways, 0)
	m := NewManager(nil, nil, Options{})
	for _, tc := range []struct {
		name string
		g    corev1.HTTPGetAction
		want seen
	}{
		{"port by name, query kept, headers", corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromString("web"), Path: "/echo?msg=poststart",
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Custom", Value: "v"}, {Name: "Host", Value: "example.test"}}},
			seen{"/echo?msg=poststart", "example.test", hookUserAgent, "*/*", "v"}},
		{"https not verified", corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromInt(portOf(tlsSrv)), Scheme: corev1.URISchemeHTTPS, Path: "/dial?host=x&request=echo%3Fmsg%3Dprestop"},
			seen{"/dial?host=x&request=echo%3Fmsg%3Dprestop", "127.0.0.1:" + strconv.Itoa(portOf(tlsSrv)), hookUserAgent, "*/*", ""}},
		{"https answered in http falls back", corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromInt(portOf(plain)), Scheme: corev1.URISchemeHTTPS, Path: "/x"},
			seen{"/x", "127.0.0.1:" + strconv.Itoa(portOf(plain)), hookUserAgent, "*/*", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &corev1.LifecycleHandler{HTTPGet: &tc.g}
			if msg, err := m.runHandler(context.Background(), pod, c, "id", h, 0); err != nil {
				t.Fatalf("hook failed: %v (%s)", err, msg)
			}
			if s := <-got; s != tc.want {
				t.Fatalf("server saw %+v, want %+v", s, tc.want)
			}
		})
	}
	// A refused connection fails the hook.
	h := &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Host: "127.0.0.1", Port: intstr.FromInt(1)}}
	if _, err := m.runHandler(context.Background(), pod, c, "id", h, 0); err == nil {
		t.Fatal("hook to a closed port succeeded")
	}
}
