package sources

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
)

// manifestServer serves whatever body and status the test sets.
type manifestServer struct {
	mu     sync.Mutex
	status int
	body   string
	delay  time.Duration
	header string
	// requests counts the requests served.
	requests int
}

func (m *manifestServer) served() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests
}

func (m *manifestServer) set(status int, body string, delay time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.status, m.body, m.delay = status, body, delay
}

func (m *manifestServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	status, body, delay := m.status, m.body, m.delay
	m.header = r.Header.Get("X-Node")
	m.requests++
	m.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

func TestHTTPSource(t *testing.T) {
	ms := &manifestServer{}
	ms.set(http.StatusOK, podManifest("web", "nginx"), 0)
	srv := httptest.NewServer(ms)
	defer srv.Close()

	s, r := newSets(), &reports{}
	clk := clocktesting.NewFakeClock(time.Now())
	h := &HTTP{URL: srv.URL + "/pods", Header: http.Header{"X-Node": {"node1"}}, NodeName: "node1",
		Period: 20 * time.Second, Timeout: 300 * time.Millisecond, Clock: clk, Report: r, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Run(ctx, s.sink); close(done) }()
	defer func() { cancel(); <-done }()
	poll := func() { clk.Step(20 * time.Second) }

	// A single Pod.
	got := s.waitFor(t, "web", hasNames("default/web-node1"), nil)
	if got[0].Spec.NodeName != "node1" || len(got[0].Spec.Tolerations) != 0 {
		t.Fatalf("URL pod = node %q tolerations %v", got[0].Spec.NodeName, got[0].Spec.Tolerations)
	}
	ms.mu.Lock()
	if ms.header != "node1" {
		t.Errorf("header X-Node = %q", ms.header)
	}
	ms.mu.Unlock()

	// An unchanged body delivers nothing new: three more fetches of it
	// (each waited for at the server), then a changed body whose set must
	// be the very next one delivered.
	n := s.count()
	for range 3 {
		before := ms.served()
		poll()
		testenv.Eventually(t, "a poll of the unchanged body", patience, func() error {
			if ms.served() == before {
				return errors.New("no request yet")
			}
			return nil
		})
	}

	// A PodList replaces the set.
	ms.set(http.StatusOK, `{"apiVersion":"v1","kind":"PodList","items":[
	 {"metadata":{"name":"a"},"spec":{"containers":[{"name":"c","image":"i"}]}},
	 {"metadata":{"name":"b","namespace":"ns"},"spec":{"containers":[{"name":"c","image":"i"}]}}]}`, 0)
	s.waitFor(t, "list", hasNames("default/a-node1", "ns/b-node1"), poll)
	if s.count() != n+1 {
		t.Fatalf("the unchanged body delivered %d more sets before the change", s.count()-n-1)
	}

	// Failures keep the last good set and are reported.
	keep := hasNames("default/a-node1", "ns/b-node1")
	for _, tc := range []struct {
		name   string
		status int
		body   string
		delay  time.Duration
		report string
	}{
		{"500", http.StatusInternalServerError, "boom", 0, "500"},
		{"timeout", http.StatusOK, podManifest("slow", "i"), 2 * time.Second, "deadline exceeded"},
		{"garbage", http.StatusOK, "this is { not a pod", 0, "not a valid Pod or PodList"},
		{"invalid pod", http.StatusOK, "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c}]}\n", 0, "spec.containers[0].image"},
	} {
		ms.set(tc.status, tc.body, tc.delay)
		testenv.Eventually(t, tc.name+" reported", patience, func() error {
			if r.find("http", tc.report) {
				return nil
			}
			poll()
			return errors.New("not reported yet")
		})
		if !keep(s.last()) {
			t.Fatalf("%s: last good set lost: %s", tc.name, podNames(s.last()))
		}
	}

	// Back to good.
	ms.set(http.StatusOK, podManifest("web", "nginx"), 0)
	s.waitFor(t, "web again", hasNames("default/web-node1"), poll)
}

func TestHTTPSourceEmptyBodyIsAnEmptySet(t *testing.T) {
	ms := &manifestServer{}
	ms.set(http.StatusOK, "", 0)
	srv := httptest.NewServer(ms)
	defer srv.Close()
	s, r := newSets(), &reports{}
	h := &HTTP{URL: srv.URL, NodeName: "n", Period: time.Hour, Report: r, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.Run(ctx, s.sink); close(done) }()
	defer func() { cancel(); <-done }()
	s.waitFor(t, "empty set", func(p []*corev1.Pod) bool { return p != nil && len(p) == 0 }, nil)
	r.waitFor(t, "empty body")
}
