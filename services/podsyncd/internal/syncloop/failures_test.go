package syncloop

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// logLines is a logger's output at debug; take reads what is new.
type logLines struct {
	testenv.LockedBuffer
	seen int
}

func (l *logLines) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
}

// take returns the lines logged at info or above since the last call, as
// "LEVEL msg", and how many debug lines there were.
func (l *logLines) take() (said []string, debug int) {
	all := l.String()
	fresh := all[l.seen:]
	l.seen = len(all)
	for _, line := range strings.Split(strings.TrimSpace(fresh), "\n") {
		if line == "" {
			continue
		}
		level, rest, _ := strings.Cut(strings.TrimPrefix(line, "level="), " ")
		msg := strings.TrimPrefix(rest, "msg=")
		if strings.HasPrefix(msg, `"`) {
			msg = msg[1 : strings.Index(msg[1:], `"`)+1]
		} else {
			msg, _, _ = strings.Cut(msg, " ")
		}
		if level == "DEBUG" {
			debug++
			continue
		}
		said = append(said, level+" "+msg)
	}
	return said, debug
}

func failureCount(t *testing.T, reg *prometheus.Registry, s step) float64 {
	t.Helper()
	got, err := testenv.GatherMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return got.Sum("microlet_podsyncd_housekeeping_failures_total", map[string]string{"step": s.label})
}

func sameLines(t *testing.T, when string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s: said\n  %s\nwant\n  %s", when, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestFailuresSaidOnChange: a step's failure is a warning the first time,
// a debug line while it goes on, an info line when the step works again;
// every failure counts. Per-pod subjects keep their own state, a failure
// during shutdown is neither said nor counted, and a forgotten pod starts
// afresh.
func TestFailuresSaidOnChange(t *testing.T) {
	var out logLines
	reg := prometheus.NewRegistry()
	f := newFailures(out.logger(), reg)
	ctx := context.Background()
	boom := errors.New("boom")

	f.observe(ctx, stepOrphanedStatuses, "", nil)
	said, debug := out.take()
	sameLines(t, "a success from the start", said)
	if debug != 0 {
		t.Fatalf("a success from the start: %d debug lines", debug)
	}

	for range 3 {
		f.observe(ctx, stepOrphanedStatuses, "", boom)
	}
	said, debug = out.take()
	sameLines(t, "three failures", said, "WARN housekeeping: dropping orphaned statuses in statusd failed")
	if debug != 2 {
		t.Fatalf("three failures: %d debug lines, want 2", debug)
	}
	f.observe(ctx, stepOrphanedStatuses, "", nil)
	f.observe(ctx, stepOrphanedStatuses, "", nil)
	said, _ = out.take()
	sameLines(t, "two successes after", said, "INFO housekeeping: dropping orphaned statuses in statusd works again")
	f.observe(ctx, stepOrphanedStatuses, "", boom)
	said, _ = out.take()
	sameLines(t, "failing again", said, "WARN housekeeping: dropping orphaned statuses in statusd failed")
	if n := failureCount(t, reg, stepOrphanedStatuses); n != 4 {
		t.Fatalf("orphaned_statuses failures = %v, want 4", n)
	}

	f.observe(ctx, stepStatusReport, "pod-a", boom)
	f.observe(ctx, stepStatusReport, "pod-b", nil)
	f.observe(ctx, stepStatusReport, "pod-b", boom)
	f.observe(ctx, stepStatusReport, "pod-a", boom)
	said, _ = out.take()
	sameLines(t, "two pods", said, "WARN status report to statusd failed", "WARN status report to statusd failed")
	f.forget(stepStatusReport, "pod-a")
	f.observe(ctx, stepStatusReport, "pod-a", nil)
	f.observe(ctx, stepStatusReport, "pod-b", nil)
	said, _ = out.take()
	sameLines(t, "one pod forgotten", said, "INFO status report to statusd works again")

	stopped, cancel := context.WithCancel(ctx)
	cancel()
	f.observe(stopped, stepContainerGC, "", context.Canceled)
	said, debug = out.take()
	sameLines(t, "a failure at shutdown", said)
	if n := failureCount(t, reg, stepContainerGC); n != 0 || debug != 0 {
		t.Fatalf("a failure at shutdown: counted %v, %d debug lines", n, debug)
	}
	if n := failureCount(t, reg, stepStatusReport); n != 3 {
		t.Fatalf("status_report failures = %v, want 3", n)
	}
}

// flakyRuntime lists no pods, or fails to list while broken is set.
type flakyRuntime struct {
	emptyRuntime
	mu     sync.Mutex
	broken bool
}

func (r *flakyRuntime) set(broken bool) { r.mu.Lock(); r.broken = broken; r.mu.Unlock() }

func (r *flakyRuntime) ListPodSandbox(ctx context.Context, f *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.broken {
		return nil, status.Error(codes.Unavailable, "runtime down")
	}
	return r.emptyRuntime.ListPodSandbox(ctx, f)
}

// flakyStatusd refuses RemoveOrphanedStatuses while broken is set.
type flakyStatusd struct {
	statusdv1.StatusServiceClient
	mu     sync.Mutex
	broken bool
	calls  int
}

func (s *flakyStatusd) set(broken bool) { s.mu.Lock(); s.broken = broken; s.mu.Unlock() }

func (s *flakyStatusd) RemoveOrphanedStatuses(context.Context, *statusdv1.RemoveOrphanedStatusesRequest, ...grpc.CallOption) (*statusdv1.RemoveOrphanedStatusesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.broken {
		return nil, status.Error(codes.Unavailable, "statusd restarting")
	}
	return &statusdv1.RemoveOrphanedStatusesResponse{}, nil
}

func (s *flakyStatusd) SetPodStatus(context.Context, *statusdv1.SetPodStatusRequest, ...grpc.CallOption) (*statusdv1.SetPodStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.broken {
		return nil, status.Error(codes.Unavailable, "statusd restarting")
	}
	return &statusdv1.SetPodStatusResponse{}, nil
}

// TestReportFailuresSaidPerPod: statusd refusing statuses is said once per
// pod, not once per sync, and once more per pod when it takes them again.
func TestReportFailuresSaidPerPod(t *testing.T) {
	var out logLines
	log := out.logger()
	reg := prometheus.NewRegistry()
	rt := &flakyRuntime{}
	st := &flakyStatusd{broken: true}
	rm := podruntime.NewManager(rt, rt, podruntime.Options{LogRoot: t.TempDir(), Log: log})
	l := New(log, rm, rt, nil, st, nil, Options{Registerer: reg})
	ctx := context.Background()
	a := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-a"}}
	b := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "u-b"}}
	for range 3 {
		l.report(ctx, a, &corev1.PodStatus{Phase: corev1.PodRunning})
		l.report(ctx, b, &corev1.PodStatus{Phase: corev1.PodPending})
	}
	said, _ := out.take()
	sameLines(t, "statusd down", said, "WARN status report to statusd failed", "WARN status report to statusd failed")
	st.set(false)
	l.report(ctx, a, &corev1.PodStatus{Phase: corev1.PodRunning})
	l.report(ctx, a, &corev1.PodStatus{Phase: corev1.PodRunning})
	said, _ = out.take()
	sameLines(t, "statusd back", said, "INFO status report to statusd works again")
	if n := failureCount(t, reg, stepStatusReport); n != 6 || st.calls != 8 {
		t.Fatalf("status_report failures = %v after %d calls, want 6 after 8", n, st.calls)
	}
}

// TestCleanupFailuresSaid: housekeeping passes whose runtime listing or
// statusd call fails say so once, count each time, and say once that the
// step works again; a pass that cannot list the runtime stops there, as
// before.
func TestCleanupFailuresSaid(t *testing.T) {
	var out logLines
	log := out.logger()
	reg := prometheus.NewRegistry()
	rt := &flakyRuntime{}
	st := &flakyStatusd{}
	rm := podruntime.NewManager(rt, rt, podruntime.Options{LogRoot: t.TempDir(), Log: log})
	l := New(log, rm, rt, nil, st, nil, Options{Registerer: reg})
	ctx := context.Background()

	rt.set(true)
	for range 3 {
		l.cleanup(ctx)
	}
	said, _ := out.take()
	sameLines(t, "runtime down", said, "WARN housekeeping: listing the runtime's pods and containers failed")
	if st.calls != 0 {
		t.Fatalf("statusd asked %d times while the runtime could not be listed", st.calls)
	}
	rt.set(false)
	st.set(true)
	l.cleanup(ctx)
	l.cleanup(ctx)
	said, _ = out.take()
	sameLines(t, "runtime back, statusd down", said,
		"INFO housekeeping: listing the runtime's pods and containers works again",
		"WARN housekeeping: dropping orphaned statuses in statusd failed")
	st.set(false)
	l.cleanup(ctx)
	said, _ = out.take()
	sameLines(t, "statusd back", said, "INFO housekeeping: dropping orphaned statuses in statusd works again")
	for s, want := range map[step]float64{stepListRuntime: 3, stepOrphanedStatuses: 2, stepOrphanedPods: 0} {
		if n := failureCount(t, reg, s); n != want {
			t.Errorf("%s failures = %v, want %v", s.label, n, want)
		}
	}
}
