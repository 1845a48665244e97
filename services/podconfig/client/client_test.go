package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podconfig/internal/server"
)

const patience = 60 * time.Second

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLog(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{t}, nil)) }

// startPodconfig runs the real podconfig service with a file source on a
// unix socket in dir and returns the socket path and the manifest dir.
func startPodconfig(t *testing.T, dir string) (sock, manifests string) {
	t.Helper()
	manifests = filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	s := server.New()
	cfg := s.Config().(*server.Config)
	cfg.NodeName = "node1"
	cfg.ManifestDir = manifests
	sock = servicetest.Start(t, s, filepath.Join(dir, "pc.sock")).Socket
	return sock, manifests
}

func dial(t *testing.T, sock string) podconfigv1.PodConfigServiceClient {
	t.Helper()
	cc, err := grpcclient.Dial(socket.Endpoint(sock))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return podconfigv1.NewPodConfigServiceClient(cc)
}

func writeManifest(t *testing.T, dir, name string) {
	t.Helper()
	y := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: c\n    image: busybox\n", name)
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name+".yaml")); err != nil {
		t.Fatal(err)
	}
}

// proxy forwards a unix socket to another and can cut every connection and
// refuse new ones until resumed, as a podconfig that went away would.
type proxy struct {
	t      *testing.T
	target string
	lis    net.Listener

	mu     sync.Mutex
	paused bool
	conns  []net.Conn
}

func newProxy(t *testing.T, path, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, target: target, lis: lis}
	t.Cleanup(func() { _ = lis.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *proxy) serve() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.paused {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		up, err := net.Dial("unix", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
	}
}

// cut closes every open connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *proxy) pause(v bool) {
	p.mu.Lock()
	p.paused = v
	p.mu.Unlock()
	if v {
		p.cut()
	}
}

// recorder collects a Watcher's events and reconnect delays.
type recorder struct {
	events  chan Event
	retries chan time.Duration
}

func newRecorder() *recorder {
	return &recorder{events: make(chan Event, 100), retries: make(chan time.Duration, 100)}
}

func (r *recorder) run(t *testing.T, c podconfigv1.PodConfigServiceClient, b wait.Backoff) {
	w := &Watcher{Client: c, Handle: func(ev Event) { r.events <- ev }, Log: testLog(t), Backoff: b,
		retried: func(d time.Duration) { r.retries <- d }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (r *recorder) next(t *testing.T) Event {
	t.Helper()
	select {
	case ev := <-r.events:
		return ev
	case <-time.After(patience):
		t.Fatal("no event")
		return Event{}
	}
}

func (r *recorder) retry(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-r.retries:
		return d
	case <-time.After(patience):
		t.Fatal("no reconnect")
		return 0
	}
}

func podNames(u Update) string {
	var n []string
	for _, p := range u.Pods {
		n = append(n, p.Name)
	}
	return strings.Join(n, ",")
}

// Against the real podconfig: a snapshot first, then updates in order; after
// the connection breaks the watcher resumes after the last sequence, so the
// update made meanwhile arrives alone, not in a new snapshot.
func TestWatcherResumesAfterLastSequence(t *testing.T) {
	dir := testenv.ShortDir(t, "pcc")
	sock, manifests := startPodconfig(t, dir)
	direct := dial(t, sock)
	writeManifest(t, manifests, "a")
	testenv.Eventually(t, "podconfig lists pod a", patience, func() error {
		r, err := direct.ListPods(context.Background(), &podconfigv1.ListPodsRequest{})
		if err != nil || len(r.GetPods()) != 1 {
			return fmt.Errorf("pods %v, err %v", r.GetPods(), err)
		}
		return nil
	})

	px := newProxy(t, filepath.Join(dir, "px.sock"), sock)
	rec := newRecorder()
	rec.run(t, dial(t, filepath.Join(dir, "px.sock")), wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Steps: 100, Cap: time.Second})

	ev := rec.next(t)
	if !ev.Resync || len(ev.Updates) != 1 || ev.Updates[0].Op != podconfigv1.Operation_OPERATION_SET || podNames(ev.Updates[0]) != "a-node1" {
		t.Fatalf("first event %+v, want a snapshot SET of a-node1", ev)
	}
	writeManifest(t, manifests, "b")
	ev = rec.next(t)
	if ev.Resync || len(ev.Updates) != 1 || ev.Updates[0].Op != podconfigv1.Operation_OPERATION_ADD || podNames(ev.Updates[0]) != "b-node1" {
		t.Fatalf("event %+v, want ADD b-node1", ev)
	}
	last := ev.Sequence

	px.pause(true)
	rec.retry(t)
	writeManifest(t, manifests, "c")
	testenv.Eventually(t, "podconfig lists pod c", patience, func() error {
		r, err := direct.ListPods(context.Background(), &podconfigv1.ListPodsRequest{})
		if err != nil || len(r.GetPods()) != 3 {
			return fmt.Errorf("pods %d, err %v", len(r.GetPods()), err)
		}
		return nil
	})
	px.pause(false)
	ev = rec.next(t)
	if ev.Resync || ev.Sequence <= last || len(ev.Updates) != 1 || ev.Updates[0].Op != podconfigv1.Operation_OPERATION_ADD || podNames(ev.Updates[0]) != "c-node1" {
		t.Fatalf("event after reconnect %+v, want only ADD c-node1 after sequence %d", ev, last)
	}
}

// fakeServer serves Watch from a script, one entry per call: an error to
// fail the call with, or messages to send before failing the stream.
type fakeServer struct {
	podconfigv1.UnimplementedPodConfigServiceServer
	mu      sync.Mutex
	script  []call
	calls   int
	resumed []uint64
}

type call struct {
	err  error
	msgs []*podconfigv1.WatchResponse
	hold bool // keep the stream open after msgs until the client leaves
}

func (f *fakeServer) Watch(req *podconfigv1.WatchRequest, srv podconfigv1.PodConfigService_WatchServer) error {
	f.mu.Lock()
	f.resumed = append(f.resumed, req.GetResumeAfter())
	c := call{hold: true}
	if f.calls < len(f.script) {
		c = f.script[f.calls]
	}
	f.calls++
	f.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	for _, m := range c.msgs {
		if err := srv.Send(m); err != nil {
			return err
		}
	}
	if c.hold {
		<-srv.Context().Done()
		return nil
	}
	return status.Error(codes.Unavailable, "stream ends")
}

func startFake(t *testing.T, f *fakeServer) podconfigv1.PodConfigServiceClient {
	t.Helper()
	dir := testenv.ShortDir(t, "pcf")
	sock := filepath.Join(dir, "pc.sock")
	servicetest.Serve(t, sock, func(s *grpc.Server) { podconfigv1.RegisterPodConfigServiceServer(s, f) })
	return dial(t, sock)
}

func rawPod(t *testing.T, name string) []byte {
	t.Helper()
	b, err := (&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A pod that does not decode is left out of its update; the stream goes on
// and the following messages arrive on the same stream.
func TestWatcherSkipsUndecodablePod(t *testing.T) {
	f := &fakeServer{script: []call{{hold: true, msgs: []*podconfigv1.WatchResponse{
		{Sequence: 1, Resync: true, Updates: []*podconfigv1.PodUpdate{{Op: podconfigv1.Operation_OPERATION_SET, Source: "file",
			Pods: [][]byte{rawPod(t, "a"), []byte("not a pod"), rawPod(t, "b")}}}},
		{Sequence: 2, Updates: []*podconfigv1.PodUpdate{{Op: podconfigv1.Operation_OPERATION_ADD, Source: "file", Pods: [][]byte{rawPod(t, "c")}}}},
	}}}}
	rec := newRecorder()
	rec.run(t, startFake(t, f), wait.Backoff{Duration: time.Millisecond})
	if ev := rec.next(t); podNames(ev.Updates[0]) != "a,b" || !ev.Resync {
		t.Fatalf("snapshot %+v, want pods a,b", ev)
	}
	if ev := rec.next(t); podNames(ev.Updates[0]) != "c" || ev.Sequence != 2 {
		t.Fatalf("second event %+v, want pod c at sequence 2", ev)
	}
	select {
	case d := <-rec.retries:
		t.Fatalf("the stream was dropped (reconnect after %s)", d)
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls != 1 {
		t.Fatalf("%d Watch calls, want 1", f.calls)
	}
}

// Failed attempts back off exponentially; a stream that delivered an event
// starts the backoff over; every attempt resumes after the last sequence.
func TestWatcherBackoffResetsAfterHealthyStream(t *testing.T) {
	down := status.Error(codes.Unavailable, "podconfig away")
	f := &fakeServer{script: []call{
		{err: down}, {err: down}, {err: down}, {err: down},
		{msgs: []*podconfigv1.WatchResponse{{Sequence: 7, Resync: true}}},
		{err: down}, {err: down},
	}}
	rec := newRecorder()
	ms := time.Millisecond
	rec.run(t, startFake(t, f), wait.Backoff{Duration: ms, Factor: 2, Steps: 100, Cap: 4 * ms})
	var got []time.Duration
	for range 7 {
		got = append(got, rec.retry(t))
	}
	want := []time.Duration{ms, 2 * ms, 4 * ms, 4 * ms, ms, 2 * ms, 4 * ms}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("reconnect delays %v, want %v", got, want)
	}
	if ev := rec.next(t); ev.Sequence != 7 {
		t.Fatalf("event %+v, want sequence 7", ev)
	}
	testenv.Eventually(t, "eighth Watch call", patience, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.calls < 8 {
			return errors.New("not yet")
		}
		if fmt.Sprint(f.resumed[:8]) != fmt.Sprint([]uint64{0, 0, 0, 0, 0, 7, 7, 7}) {
			return fmt.Errorf("resume_after per call %v", f.resumed[:8])
		}
		return nil
	})
}
