package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// dockerSocket is the Docker Engine runtime-shim would use without the
// proxy: DOCKER_HOST's socket, else Docker's default one.
func dockerSocket(t *testing.T) string {
	h := os.Getenv("DOCKER_HOST")
	if h == "" {
		return "/var/run/docker.sock"
	}
	sock, ok := strings.CutPrefix(h, "unix://")
	if !ok {
		t.Fatalf("DOCKER_HOST=%s: the proxy needs Docker on a unix socket", h)
	}
	return sock
}

// dockerProxy is a reverse proxy on a unix socket in front of the Docker
// Engine, for a runtime-shim started with --docker-host=unix://<sock>. It
// passes every call through, except that it can hold one container create
// chosen by its labels (holdCreate): the shim's call is then in flight,
// Docker has not seen it yet, and the test decides when Docker does.
type dockerProxy struct {
	sock string
	rp   *httputil.ReverseProxy

	mu    sync.Mutex
	hold  *heldCreate   // armed, not yet taken
	holds []*heldCreate // every hold, opened at cleanup
}

// heldCreate is one container create the proxy holds.
type heldCreate struct {
	match   func(labels map[string]string) bool
	arrived chan struct{} // closed when the create is held
	release chan struct{} // closed by open
	once    sync.Once
	done    chan *httptest.ResponseRecorder
}

func (h *heldCreate) open() { h.once.Do(func() { close(h.release) }) }

func startDockerProxy(t *testing.T) *dockerProxy {
	t.Helper()
	// A short directory: a unix socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("/tmp", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	target := dockerSocket(t)
	p := &dockerProxy{sock: filepath.Join(dir, "docker.sock")}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", target)
		}},
		// Log following, attach and the event stream pass as they come.
		FlushInterval: -1,
	}
	ln, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		// Never leave a handler waiting.
		p.mu.Lock()
		for _, h := range p.holds {
			h.open()
		}
		p.mu.Unlock()
		_ = srv.Close()
	})
	return p
}

// holdCreate makes the proxy hold the next container create whose labels
// match.
func (p *dockerProxy) holdCreate(match func(labels map[string]string) bool) *heldCreate {
	h := &heldCreate{match: match, arrived: make(chan struct{}), release: make(chan struct{}), done: make(chan *httptest.ResponseRecorder, 1)}
	p.mu.Lock()
	p.hold = h
	p.holds = append(p.holds, h)
	p.mu.Unlock()
	return h
}

// take returns the hold a create with labels falls under, and disarms it.
func (p *dockerProxy) take(labels map[string]string) *heldCreate {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hold
	if h == nil || !h.match(labels) {
		return nil
	}
	p.hold = nil
	return h
}

func (p *dockerProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/containers/create") {
		p.rp.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var cfg struct{ Labels map[string]string }
	_ = json.Unmarshal(body, &cfg)
	h := p.take(cfg.Labels)
	if h == nil {
		p.rp.ServeHTTP(w, r)
		return
	}
	close(h.arrived)
	<-h.release
	// The caller may be dead by now: the create goes on to Docker without
	// it, as a request already on the wire would, and its answer goes to
	// the test.
	rec := httptest.NewRecorder()
	p.rp.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
	h.done <- rec
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// Release lets the held create through to Docker and returns Docker's
// status code and the created container's ID (empty when it failed).
func (h *heldCreate) Release() (int, string) {
	h.open()
	rec := <-h.done
	var out struct{ ID string }
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out.ID
}
