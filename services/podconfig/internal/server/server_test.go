package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podconfig/internal/stream"
)

const wait = 60 * time.Second

// harness runs a podconfig Server on a real unix socket in a short temp dir.
type harness struct {
	t      *testing.T
	dir    string // manifest dir
	sock   string
	client podconfigv1.PodConfigServiceClient
	reg    *prometheus.Registry
}

func start(t *testing.T, mutate func(*Server)) *harness {
	t.Helper()
	run := testenv.ShortDir(t, "pc")
	h := &harness{t: t, dir: filepath.Join(run, "manifests"), sock: filepath.Join(run, "pc.sock")}
	if err := os.Mkdir(h.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := New()
	s.cfg.NodeName = "node1"
	s.cfg.ManifestDir = h.dir
	s.cfg.FileCheckFrequency = time.Hour // only fsnotify drives these tests
	if mutate != nil {
		mutate(s)
	}
	h.reg = servicetest.Start(t, s, h.sock, servicetest.WithLogLevel(slog.LevelWarn)).Env.Registry
	h.client = h.dial()
	return h
}

func (h *harness) dial(opts ...grpc.DialOption) podconfigv1.PodConfigServiceClient {
	cc, err := grpcclient.Dial(socket.Endpoint(h.sock), opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = cc.Close() })
	return podconfigv1.NewPodConfigServiceClient(cc)
}

func manifestYAML(name, image, note string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations:
    note: %q
spec:
  containers:
  - name: c
    image: %s
`, name, note, image)
}

// write replaces a manifest atomically, the way editors and config tools do.
func (h *harness) write(file, content string) {
	h.t.Helper()
	tmp := filepath.Join(h.dir, "."+file+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.dir, file)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) waitReady() {
	h.t.Helper()
	testenv.Eventually(h.t, "sources ready", wait, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := h.client.SourcesReady(ctx, &podconfigv1.SourcesReadyRequest{})
		if err == nil && !r.GetAllReady() {
			err = fmt.Errorf("sources %v", r.GetSources())
		}
		return err
	})
}

// waitPods polls ListPods until cond holds.
func (h *harness) waitPods(what string, cond func([]*podconfigv1.PodSummary) bool) *podconfigv1.ListPodsResponse {
	h.t.Helper()
	var got *podconfigv1.ListPodsResponse
	testenv.Eventually(h.t, what, wait, func() error {
		r, err := h.client.ListPods(context.Background(), &podconfigv1.ListPodsRequest{})
		if err != nil {
			return err
		}
		if !cond(r.GetPods()) {
			return fmt.Errorf("%d pods", len(r.GetPods()))
		}
		got = r
		return nil
	})
	return got
}

type recv struct {
	t   *testing.T
	s   podconfigv1.PodConfigService_WatchClient
	ch  chan *podconfigv1.WatchResponse
	err chan error
}

func (h *harness) watch(ctx context.Context, c podconfigv1.PodConfigServiceClient, after uint64) *recv {
	h.t.Helper()
	s, err := c.Watch(ctx, &podconfigv1.WatchRequest{ResumeAfter: after})
	if err != nil {
		h.t.Fatal(err)
	}
	r := &recv{t: h.t, s: s, ch: make(chan *podconfigv1.WatchResponse, 1), err: make(chan error, 1)}
	go func() {
		for {
			m, err := s.Recv()
			if err != nil {
				r.err <- err
				return
			}
			select {
			case r.ch <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return r
}

func (r *recv) next() *podconfigv1.WatchResponse {
	r.t.Helper()
	select {
	case m := <-r.ch:
		return m
	case err := <-r.err:
		r.t.Fatalf("watch ended: %v", err)
	case <-time.After(wait):
		r.t.Fatal("no watch message")
	}
	return nil
}

func decodePods(t *testing.T, u *podconfigv1.PodUpdate) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	for _, b := range u.GetPods() {
		p := &corev1.Pod{}
		if err := p.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func names(t *testing.T, u *podconfigv1.PodUpdate) string {
	var n []string
	for _, p := range decodePods(t, u) {
		n = append(n, p.Name)
	}
	return strings.Join(n, ",")
}

func TestWatchSnapshotThenOrderedUpdates(t *testing.T) {
	h := start(t, nil)
	h.write("a.yaml", manifestYAML("a", "busybox:1", "x"))
	h.write("b.yaml", manifestYAML("b", "busybox:1", "x"))
	h.waitReady()
	h.waitPods("two pods", func(p []*podconfigv1.PodSummary) bool { return len(p) == 2 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := h.watch(ctx, h.client, 0)
	snap := w.next()
	if !snap.GetResync() || len(snap.GetUpdates()) != 1 {
		t.Fatalf("first message = resync %v, %d updates; want a snapshot with one SET", snap.GetResync(), len(snap.GetUpdates()))
	}
	set := snap.GetUpdates()[0]
	if set.GetOp() != podconfigv1.Operation_OPERATION_SET || set.GetSource() != "file" || names(t, set) != "a-node1,b-node1" {
		t.Fatalf("snapshot = %s %s [%s]", set.GetOp(), set.GetSource(), names(t, set))
	}
	seq := snap.GetSequence()

	expect := func(op podconfigv1.Operation, who string) *podconfigv1.WatchResponse {
		t.Helper()
		m := w.next()
		seq++
		if m.GetResync() || m.GetSequence() != seq || len(m.GetUpdates()) != 1 {
			t.Fatalf("got seq %d resync %v (%d updates), want seq %d", m.GetSequence(), m.GetResync(), len(m.GetUpdates()), seq)
		}
		u := m.GetUpdates()[0]
		if u.GetOp() != op || names(t, u) != who {
			t.Fatalf("seq %d: got %s [%s], want %s [%s]", seq, u.GetOp(), names(t, u), op, who)
		}
		return m
	}
	h.write("c.yaml", manifestYAML("c", "busybox:1", "x"))
	expect(podconfigv1.Operation_OPERATION_ADD, "c-node1")
	h.write("a.yaml", manifestYAML("a", "busybox:2", "x"))
	// A new image is a new pod to the kubelet: the UID covers the spec.
	expect(podconfigv1.Operation_OPERATION_REMOVE, "a-node1")
	expect(podconfigv1.Operation_OPERATION_ADD, "a-node1")
	if err := os.Remove(filepath.Join(h.dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	expect(podconfigv1.Operation_OPERATION_REMOVE, "b-node1")

	// ListPods agrees with the stream.
	l := h.waitPods("a and c", func(p []*podconfigv1.PodSummary) bool { return len(p) == 2 })
	if l.GetSequence() != seq || l.GetPods()[0].GetName() != "a-node1" || l.GetPods()[0].GetLastOp() != podconfigv1.Operation_OPERATION_ADD ||
		l.GetPods()[0].GetSource() != "file" || l.GetPods()[0].GetUid() == "" {
		t.Fatalf("ListPods = seq %d %v", l.GetSequence(), l.GetPods())
	}
}

func TestWatchResume(t *testing.T) {
	h := start(t, func(s *Server) { s.streamOpts = []stream.Option{stream.WithRingSize(4)} })
	h.write("a.yaml", manifestYAML("a", "busybox", "0"))
	h.waitReady()
	h.waitPods("a", func(p []*podconfigv1.PodSummary) bool { return len(p) == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	first := h.watch(ctx, h.client, 0)
	snap := first.next()
	cancel()
	last := snap.GetSequence()

	// Two changes while nobody watches.
	h.write("b.yaml", manifestYAML("b", "busybox", "0"))
	h.write("c.yaml", manifestYAML("c", "busybox", "0"))
	l := h.waitPods("a, b and c", func(p []*podconfigv1.PodSummary) bool { return len(p) == 3 })

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	w := h.watch(ctx2, h.client, last)
	var got []string
	for seq := last + 1; seq <= l.GetSequence(); seq++ {
		m := w.next()
		if m.GetResync() || m.GetSequence() != seq {
			t.Fatalf("resume: got seq %d resync %v, want seq %d", m.GetSequence(), m.GetResync(), seq)
		}
		for _, u := range m.GetUpdates() {
			// The file source may see both writes in one scan and send
			// them as one ADD of two pods: count pods, not updates.
			for _, p := range decodePods(t, u) {
				got = append(got, u.GetOp().String()+":"+p.Name)
			}
		}
	}
	sort.Strings(got)
	if strings.Join(got, " ") != "OPERATION_ADD:b-node1 OPERATION_ADD:c-node1" {
		t.Fatalf("missed updates = %v", got)
	}

	// More changes than the ring holds: resuming from the old number gives
	// a fresh snapshot.
	for i := range 6 {
		h.write("a.yaml", manifestYAML("a", "busybox", fmt.Sprint(i+1)))
		want := fmt.Sprint(i + 1)
		h.waitPods("note "+want, func(p []*podconfigv1.PodSummary) bool {
			pod := &corev1.Pod{}
			return len(p) == 3 && pod.Unmarshal(p[0].GetPod()) == nil && pod.Annotations["note"] == want
		})
	}
	for _, after := range []uint64{last, 1} {
		ctx3, cancel3 := context.WithCancel(context.Background())
		m := h.watch(ctx3, h.client, after).next()
		cancel3()
		if !m.GetResync() || len(m.GetUpdates()) != 1 || names(t, m.GetUpdates()[0]) != "a-node1,b-node1,c-node1" {
			t.Fatalf("resume after %d: resync %v updates %d", after, m.GetResync(), len(m.GetUpdates()))
		}
	}
	if v := counterValue(t, h.reg, "microlet_podconfig_resyncs_total"); v < 2 {
		t.Fatalf("resyncs_total = %v, want >= 2", v)
	}
}

func TestSlowWatcherIsResyncedWhileFastKeepsUp(t *testing.T) {
	h := start(t, func(s *Server) { s.streamOpts = []stream.Option{stream.WithQueueSize(2)} })
	h.write("a.yaml", manifestYAML("a", "busybox", "0"))
	h.waitReady()
	h.waitPods("a", func(p []*podconfigv1.PodSummary) bool { return len(p) == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fast := h.watch(ctx, h.client, 0)
	fastSeq := fast.next().GetSequence()
	// The slow client has a small fixed HTTP/2 window and does not read, so
	// the server's sends to it block and its queue overflows.
	slowClient := h.dial(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	slowStream, err := slowClient.Watch(ctx, &podconfigv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}

	big := strings.Repeat("x", 200<<10)
	const rounds = 12
	hasNote := func(m *podconfigv1.WatchResponse, prefix string) bool {
		for _, u := range m.GetUpdates() {
			if u.GetOp() == podconfigv1.Operation_OPERATION_REMOVE {
				continue
			}
			for _, p := range decodePods(t, u) {
				if strings.HasPrefix(p.Annotations["note"], prefix) {
					return true
				}
			}
		}
		return false
	}
	for i := 1; i <= rounds; i++ {
		prefix := fmt.Sprintf("%d-", i)
		h.write("a.yaml", manifestYAML("a", "busybox", prefix+big))
		// The note is part of the pod, so of its UID: each round is a
		// REMOVE and an ADD, every message with the next sequence.
		for {
			m := fast.next()
			fastSeq++
			if m.GetResync() || m.GetSequence() != fastSeq {
				t.Fatalf("fast watcher: seq %d resync %v, want seq %d", m.GetSequence(), m.GetResync(), fastSeq)
			}
			if hasNote(m, prefix) {
				break
			}
		}
	}

	// Now read the slow one: it must have been resynced past its initial
	// snapshot, and it ends on the same state as the fast one.
	first, err := slowStream.Recv()
	if err != nil || !first.GetResync() {
		t.Fatalf("slow watcher's first message: %v %v", first, err)
	}
	resynced := false
	last := fmt.Sprintf("%d-", rounds)
	for {
		m, err := slowStream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		resynced = resynced || m.GetResync()
		if m.GetSequence() > fastSeq {
			t.Fatalf("slow watcher ran past the last sequence: %d > %d", m.GetSequence(), fastSeq)
		}
		if m.GetSequence() == fastSeq {
			if !hasNote(m, last) {
				t.Fatal("slow watcher's last message does not carry the last change")
			}
			break
		}
	}
	if !resynced {
		t.Fatal("slow watcher was never resynced")
	}
	if v := counterValue(t, h.reg, "microlet_podconfig_resyncs_total"); v < 1 {
		t.Fatalf("resyncs_total = %v", v)
	}
}

func TestBadManifestIsReported(t *testing.T) {
	h := start(t, nil)
	h.write("good.yaml", manifestYAML("good", "busybox", "0"))
	h.write("bad.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n  - name: c\n")
	h.waitReady()
	h.waitPods("good", func(p []*podconfigv1.PodSummary) bool { return len(p) == 1 && p[0].GetName() == "good-node1" })
	var src *podconfigv1.SourceState
	testenv.Eventually(t, "the bad manifest reported", wait, func() error {
		r, err := h.client.SourcesReady(context.Background(), &podconfigv1.SourcesReadyRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if src = r.GetSources()[0]; src.GetLastError() == "" {
			return fmt.Errorf("source %v", src)
		}
		return nil
	})
	if src.GetName() != "file" || !src.GetReady() || src.GetPods() != 1 ||
		!strings.Contains(src.GetLastError(), "bad.yaml") || !strings.Contains(src.GetLastError(), "spec.containers[0].image") {
		t.Fatalf("source state = %v", src)
	}
	if v := counterValue(t, h.reg, "microlet_podconfig_source_errors_total"); v < 1 {
		t.Fatalf("source_errors_total = %v", v)
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}
