package logs

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// fixture is a pod "default/web" whose containers' logs are files in a
// temporary directory, with a fake CRI that knows their paths.
type fixture struct {
	dir  string
	pods fakePods
	rt   *fakeRuntime
}

// appLines is the current "app" container's log: two streams, a line
// split into a partial (P) and a final (F) part, one second apart.
var appLines = []string{
	criLine(0, "stdout", "F", "one"),
	criLine(1*time.Second, "stderr", "F", "two"),
	criLine(2*time.Second, "stdout", "P", "thr"),
	criLine(3*time.Second, "stdout", "F", "ee"),
	criLine(4*time.Second, "stdout", "F", "four"),
	criLine(5*time.Second, "stderr", "F", "five"),
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	logPath := func(name string) string { return filepath.Join(f.dir, "default_web_uid", name) }
	writeLog(t, logPath("app/1.log"), appLines...)
	writeLog(t, logPath("app/0.log"), criLine(-time.Hour, "stdout", "F", "first run"), criLine(-time.Hour+time.Second, "stderr", "F", "first run failed"))
	writeLog(t, logPath("init/0.log"), criLine(-2*time.Hour, "stdout", "F", "init done"))
	f.rt = newFakeRuntime(
		criContainer("app-1", logPath("app/1.log"), runtimeapi.ContainerState_CONTAINER_RUNNING),
		criContainer("app-0", logPath("app/0.log"), runtimeapi.ContainerState_CONTAINER_EXITED),
		criContainer("init-0", logPath("init/0.log"), runtimeapi.ContainerState_CONTAINER_EXITED),
		criContainer("nofile-0", logPath("nofile/0.log"), runtimeapi.ContainerState_CONTAINER_EXITED),
	)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid"},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init"}},
			Containers:     []corev1.Container{{Name: "app"}, {Name: "pulling"}, {Name: "new"}, {Name: "gone"}, {Name: "nofile"}},
		},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", ContainerID: "docker://init-0", State: terminated("docker://init-0")}},
			ContainerStatuses: []corev1.ContainerStatus{
				{Name: "app", ContainerID: "docker://app-1", State: running(), LastTerminationState: terminated("docker://app-0"), RestartCount: 1},
				{Name: "pulling", State: waiting("ImagePullBackOff")},
				{Name: "gone", ContainerID: "docker://gone-0", State: running()},
				{Name: "nofile", ContainerID: "docker://nofile-0", State: terminated("docker://nofile-0")},
			},
		},
	}
	f.pods = fakePods{"default/web": pod}
	return f
}

func TestHandler(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name     string
		path     string // after /containerLogs/
		query    string
		split    bool
		wantCode int
		wantBody string
		prefix   bool // wantBody is the body's beginning
		late     bool // refused after the chunked encoding was chosen
	}{
		{name: "plain: both streams in file order, partial lines joined", path: "default/web/app", wantCode: 200, wantBody: "one\ntwo\nthree\nfour\nfive\n"},
		{name: "tailLines", path: "default/web/app", query: "tailLines=2", wantCode: 200, wantBody: "four\nfive\n"},
		// Tail counts lines of the file: the partial line is one of the four.
		{name: "tailLines counts partial lines", path: "default/web/app", query: "tailLines=4", wantCode: 200, wantBody: "three\nfour\nfive\n"},
		{name: "tail alias", path: "default/web/app", query: "tail=1", wantCode: 200, wantBody: "five\n"},
		{name: "tail=all", path: "default/web/app", query: "tail=all&tailLines=1", wantCode: 200, wantBody: "one\ntwo\nthree\nfour\nfive\n"},
		{name: "tailLines=0", path: "default/web/app", query: "tailLines=0", wantCode: 200, wantBody: ""},
		{name: "tailLines beyond the file", path: "default/web/app", query: "tailLines=100", wantCode: 200, wantBody: "one\ntwo\nthree\nfour\nfive\n"},
		{name: "sinceTime", path: "default/web/app", query: "sinceTime=" + t0.Add(4*time.Second).Format(time.RFC3339), wantCode: 200, wantBody: "four\nfive\n"},
		{name: "sinceTime in the future", path: "default/web/app", query: "sinceTime=" + t0.Add(time.Hour).Format(time.RFC3339), wantCode: 200, wantBody: ""},
		// The clock is at t0+6s: 2 s back is t0+4s.
		{name: "sinceSeconds", path: "default/web/app", query: "sinceSeconds=2", wantCode: 200, wantBody: "four\nfive\n"},
		{
			name: "timestamps: one prefix per line, fixed width", path: "default/web/app", query: "timestamps=true", wantCode: 200,
			wantBody: "2026-01-02T03:04:05.000000000Z one\n2026-01-02T03:04:06.000000000Z two\n2026-01-02T03:04:07.000000000Z three\n" +
				"2026-01-02T03:04:09.000000000Z four\n2026-01-02T03:04:10.000000000Z five\n",
		},
		{name: "limitBytes cuts mid-line", path: "default/web/app", query: "limitBytes=6", wantCode: 200, wantBody: "one\ntw"},
		{name: "limitBytes counts timestamps", path: "default/web/app", query: "limitBytes=35&timestamps=1", wantCode: 200, wantBody: "2026-01-02T03:04:05.000000000Z one\n"},
		{name: "limitBytes with tailLines", path: "default/web/app", query: "limitBytes=7&tailLines=2", wantCode: 200, wantBody: "four\nfi"},
		{name: "previous", path: "default/web/app", query: "previous=true", wantCode: 200, wantBody: "first run\nfirst run failed\n"},
		{name: "previous with tail", path: "default/web/app", query: "previous=true&tailLines=1", wantCode: 200, wantBody: "first run failed\n"},
		{name: "init container", path: "default/web/init", wantCode: 200, wantBody: "init done\n"},
		{name: "stream=All", path: "default/web/app", query: "stream=All", wantCode: 200, wantBody: "one\ntwo\nthree\nfour\nfive\n"},
		{name: "split streams: stdout", path: "default/web/app", query: "stream=Stdout", split: true, wantCode: 200, wantBody: "one\nthree\nfour\n"},
		{name: "split streams: stderr", path: "default/web/app", query: "stream=Stderr", split: true, wantCode: 200, wantBody: "two\nfive\n"},
		{name: "split streams: limitBytes counts the chosen stream only", path: "default/web/app", query: "stream=Stderr&limitBytes=5", split: true, wantCode: 200, wantBody: "two\nf"},
		{name: "split streams: default All", path: "default/web/app", split: true, wantCode: 200, wantBody: "one\ntwo\nthree\nfour\nfive\n"},

		{name: "bad number", path: "default/web/app", query: "tailLines=x", wantCode: 400, wantBody: `{"message": "Unable to decode query."}`},
		{name: "bad sinceTime", path: "default/web/app", query: "sinceTime=now", wantCode: 400, wantBody: `{"message": "Unable to decode query."}`},
		{name: "negative tailLines", path: "default/web/app", query: "tailLines=-1", wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		{name: "negative tail", path: "default/web/app", query: "tail=-1", wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		{name: "limitBytes 0", path: "default/web/app", query: "limitBytes=0", wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		{name: "sinceSeconds 0", path: "default/web/app", query: "sinceSeconds=0", wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		{name: "both since", path: "default/web/app", query: "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z", wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		{name: "unknown stream", path: "default/web/app", query: "stream=Both", wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		{name: "stream with tailLines", path: "default/web/app", query: "stream=Stdout&tailLines=1", split: true, wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		// Validation comes before the pod lookup.
		{name: "invalid query on a missing pod", path: "default/nope/app", query: "limitBytes=0", wantCode: 422, wantBody: `{"message": "Invalid request."}`},
		{
			name: "single stream without the gate", path: "default/web/app", query: "stream=Stdout", wantCode: 400,
			wantBody: `unable to return the given log stream: "Stdout". Please enable PodLogsQuerySplitStreams feature gate in kubelet`,
		},
		{name: "missing pod", path: "default/nope/app", wantCode: 404, wantBody: `pod "nope" does not exist`},
		{name: "pod in another namespace", path: "other/web/app", wantCode: 404, wantBody: `pod "web" does not exist`},
		{name: "container not in spec", path: "default/web/nope", wantCode: 404, wantBody: `container "nope" not found in pod "web"`},
		{name: "container waiting", path: "default/web/pulling", late: true, wantCode: 400, wantBody: `container "pulling" in pod "web" is waiting to start: trying and failing to pull image`},
		{name: "container without status", path: "default/web/new", late: true, wantCode: 400, wantBody: `container "new" in pod "web" is not available`},
		{name: "previous never restarted", path: "default/web/init", query: "previous=1", late: true, wantCode: 400, wantBody: `previous terminated container "init" in pod "web" not found`},
		// Past the state checks the kubelet has sent its 200 already; a
		// failure is the rest of the body.
		{name: "container unknown to the runtime", path: "default/web/gone", wantCode: 200, wantBody: "unable to retrieve container logs for docker://gone-0"},
		{name: "log file missing", path: "default/web/nofile", wantCode: 200, prefix: true, wantBody: `failed to try resolving symlinks in path "` + filepath.Join(f.dir, "default_web_uid/nofile/0.log") + `"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHandler(f.pods, f.rt, WithLogger(testLogger(t)), WithSplitStreams(tt.split),
				WithClock(clocktesting.NewFakePassiveClock(t0.Add(6*time.Second))))
			url := serve(t, h) + "/containerLogs/" + tt.path
			if tt.query != "" {
				url += "?" + tt.query
			}
			resp := get(t, url)
			body := resp.body
			if resp.code != tt.wantCode {
				t.Errorf("status = %d, want %d", resp.code, tt.wantCode)
			}
			if body != tt.wantBody && !(tt.prefix && strings.HasPrefix(body, tt.wantBody)) {
				t.Errorf("body = %q, want %q", body, tt.wantBody)
			}
			// The kubelet sets Transfer-Encoding: chunked just before reading
			// the log, which also stops net/http from sniffing a type.
			chunked := len(resp.transferEncoding) == 1 && resp.transferEncoding[0] == "chunked"
			ct := resp.header.Get("Content-Type")
			if resp.code == http.StatusOK || tt.late {
				if !chunked || ct != "" {
					t.Errorf("Transfer-Encoding %v, Content-Type %q; want chunked and none", resp.transferEncoding, ct)
				}
			} else if ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type = %q, want text/plain", ct)
			}
		})
	}
}

// The mux cannot route empty path segments, so the missing-parameter
// answers are checked on the handler directly.
func TestHandlerMissingPathValues(t *testing.T) {
	f := newFixture(t)
	h := NewHandler(f.pods, f.rt, WithLogger(testLogger(t)))
	tests := []struct {
		ns, pod, container string
		want               string
	}{
		{ns: "default", pod: "", container: "app", want: `{"message": "Missing podID."}`},
		{ns: "default", pod: "web", container: "", want: `{"message": "Missing container name."}`},
		{ns: "", pod: "web", container: "app", want: `{"message": "Missing podNamespace."}`},
		// The kubelet checks the pod first.
		{ns: "", pod: "", container: "", want: `{"message": "Missing podID."}`},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/containerLogs/x/y/z", nil)
		r.SetPathValue("namespace", tt.ns)
		r.SetPathValue("pod", tt.pod)
		r.SetPathValue("container", tt.container)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusBadRequest || w.Body.String() != tt.want {
			t.Errorf("%q/%q/%q: got %d %q, want 400 %q", tt.ns, tt.pod, tt.container, w.Code, w.Body.String(), tt.want)
		}
	}
}

func TestHandlerOnlyGET(t *testing.T) {
	f := newFixture(t)
	url := serve(t, NewHandler(f.pods, f.rt, WithLogger(testLogger(t)))) + "/containerLogs/default/web/app?follow=true"
	resp, err := http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Errorf("HEAD: %d, Allow %q; want 405 allowing GET", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

func TestHandlerPodSourceDown(t *testing.T) {
	f := newFixture(t)
	resp := get(t, serve(t, NewHandler(failingPods{}, f.rt, WithLogger(testLogger(t))))+"/containerLogs/default/web/app")
	if resp.code != http.StatusServiceUnavailable || !strings.Contains(resp.body, "connection refused") {
		t.Errorf("got %d %q, want 503 naming the cause", resp.code, resp.body)
	}
}

// noFlush is a ResponseWriter that cannot flush.
type noFlush struct{ w http.ResponseWriter }

func (n noFlush) Header() http.Header         { return n.w.Header() }
func (n noFlush) Write(p []byte) (int, error) { return n.w.Write(p) }
func (n noFlush) WriteHeader(code int)        { n.w.WriteHeader(code) }

// unwrapper hides its writer's methods but lets ResponseController find them.
type unwrapper struct{ noFlush }

func (u unwrapper) Unwrap() http.ResponseWriter { return u.w }

func TestHandlerNeedsFlusher(t *testing.T) {
	f := newFixture(t)
	h := NewHandler(f.pods, f.rt, WithLogger(testLogger(t)))
	req := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/containerLogs/default/web/app", nil)
		r.SetPathValue("namespace", "default")
		r.SetPathValue("pod", "web")
		r.SetPathValue("container", "app")
		return r
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(noFlush{rec}, req())
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "cannot show logs") {
		t.Errorf("without a flusher: %d %q, want 500", rec.Code, rec.Body.String())
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(unwrapper{noFlush{rec}}, req())
	if rec.Code != http.StatusOK || rec.Body.String() != "one\ntwo\nthree\nfour\nfive\n" || !rec.Flushed {
		t.Errorf("through Unwrap: %d %q flushed=%v, want the log", rec.Code, rec.Body.String(), rec.Flushed)
	}
}
