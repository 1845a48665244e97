package logs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/nodeapi/internal/pods"
)

// t0 is when the fixture logs' first line was written.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakePods is a pods.Getter over a fixed set.
type fakePods map[string]*corev1.Pod

func (f fakePods) Get(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	if p, ok := f[namespace+"/"+name]; ok {
		return p.DeepCopy(), nil
	}
	return nil, fmt.Errorf("%w: %s/%s", pods.ErrNotFound, namespace, name)
}

// failingPods is a pods.Getter whose backend is down.
type failingPods struct{}

func (failingPods) Get(context.Context, string, string) (*corev1.Pod, error) {
	return nil, errors.New("podconfig: connection refused")
}

// criLine is one line of a CRI-format log: timestamp, stream, tag
// (F full, P partial) and the text.
func criLine(at time.Duration, stream, tag, text string) string {
	return t0.Add(at).Format(time.RFC3339Nano) + " " + stream + " " + tag + " " + text + "\n"
}

// writeLog writes lines to path, creating its directory.
func writeLog(t testing.TB, path string, lines ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// appendLog appends lines to path.
func appendLog(t testing.TB, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(lines, "")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// fakeRuntime answers ContainerStatus, the only CRI call the handler and
// the CRI log reader make, from a map; any other call panics on the nil
// embedded interface. (cri-api's own fake would pull testify into go.mod.)
type fakeRuntime struct {
	criapi.RuntimeService

	mu         sync.Mutex
	containers map[string]*runtimeapi.ContainerStatus
	calls      int
}

func newFakeRuntime(cs ...*runtimeapi.ContainerStatus) *fakeRuntime {
	f := &fakeRuntime{containers: map[string]*runtimeapi.ContainerStatus{}}
	for _, c := range cs {
		f.containers[c.Id] = c
	}
	return f
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	c, ok := f.containers[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "container %q not found", id)
	}
	return &runtimeapi.ContainerStatusResponse{Status: proto.Clone(c).(*runtimeapi.ContainerStatus)}, nil
}

// setState changes a container's state the way the runtime would.
func (f *fakeRuntime) setState(id string, state runtimeapi.ContainerState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[id].State = state
}

// statusCalls counts ContainerStatus calls so far.
func (f *fakeRuntime) statusCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// criContainer is a CRI container status with its log path.
func criContainer(id, logPath string, state runtimeapi.ContainerState) *runtimeapi.ContainerStatus {
	return &runtimeapi.ContainerStatus{Id: id, State: state, LogPath: logPath, Metadata: &runtimeapi.ContainerMetadata{Name: id}}
}

// testLogger logs through t, so a failing test shows the handler's view.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// serve registers h under the pattern the nodeapi server uses and returns
// the test server's URL.
func serve(t testing.TB, h http.Handler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /containerLogs/{namespace}/{pod}/{container}", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// reply is a finished response.
type reply struct {
	code             int
	header           http.Header
	transferEncoding []string
	body             string
}

// get fetches a URL and reads the whole body.
func get(t testing.TB, url string) reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, transferEncoding: resp.TransferEncoding, body: string(b)}
}
