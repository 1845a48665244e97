package statusreport

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// downStatusd records what reaches it, and answers Unavailable while down
// (a statusd restarting). known pods answer reclaim reports; others are
// NotFound, as in statusd.
type downStatusd struct {
	statusdv1.StatusServiceClient
	mu    sync.Mutex
	down  bool
	calls int
	got   []string // what statusd took, in order: "status <uid> <message>", "reclaimed <uid>"
	known map[string]bool
}

func (s *downStatusd) set(down bool) { s.mu.Lock(); s.down = down; s.mu.Unlock() }

func (s *downStatusd) SetPodStatus(_ context.Context, req *statusdv1.SetPodStatusRequest, _ ...grpc.CallOption) (*statusdv1.SetPodStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.down {
		return nil, status.Error(codes.Unavailable, "statusd restarting")
	}
	var pod corev1.Pod
	var st corev1.PodStatus
	if err := pod.Unmarshal(req.GetPod()); err != nil {
		return nil, err
	}
	if err := st.Unmarshal(req.GetStatus()); err != nil {
		return nil, err
	}
	s.got = append(s.got, fmt.Sprintf("status %s %s", pod.UID, st.Message))
	if s.known == nil {
		s.known = map[string]bool{}
	}
	s.known[string(pod.UID)] = true
	return &statusdv1.SetPodStatusResponse{}, nil
}

func (s *downStatusd) ReportPodResourcesReclaimed(_ context.Context, req *statusdv1.ReportPodResourcesReclaimedRequest, _ ...grpc.CallOption) (*statusdv1.ReportPodResourcesReclaimedResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.down {
		return nil, status.Error(codes.Unavailable, "statusd restarting")
	}
	if !s.known[req.GetPodUid()] {
		return nil, status.Error(codes.NotFound, "no such pod")
	}
	s.got = append(s.got, "reclaimed "+req.GetPodUid())
	return &statusdv1.ReportPodResourcesReclaimedResponse{}, nil
}

func (s *downStatusd) taken() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func testPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("u-" + name)}}
}

func msg(m string) *corev1.PodStatus { return &corev1.PodStatus{Phase: corev1.PodFailed, Message: m} }

// resendRound lets the resend loop's backoff timer fire once (it waits on
// clk) and waits until the round is over: nothing waits, or statusd was
// called again.
func resendRound(t *testing.T, clk *clocktesting.FakeClock, r *Reporter, st *downStatusd) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the resend loop never waited")
		}
		time.Sleep(time.Millisecond)
	}
	st.mu.Lock()
	before := st.calls
	st.mu.Unlock()
	clk.Step(MaxResend)
	for {
		st.mu.Lock()
		called := st.calls > before
		st.mu.Unlock()
		if called && (r.Waiting() == 0 || clk.HasWaiters()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the resend round never ended")
		}
		time.Sleep(time.Millisecond)
	}
}

func sameList(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: statusd took %q, want %q", what, got, want)
	}
}

// TestWaitingStatusIsResent: a pod's last status (a finished pod, never
// synced again) and its reclaim report, sent while statusd was down, reach
// statusd once it is back, the status first; only the newest status of
// each pod is resent, and a forgotten pod's nothing.
func TestWaitingStatusIsResent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Now())
	st := &downStatusd{down: true}
	var results []string
	var resMu sync.Mutex
	r := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, WithClock(clk),
		WithResult(func(_ context.Context, pod *corev1.Pod, err error) {
			resMu.Lock()
			results = append(results, fmt.Sprintf("%s %v", pod.Name, err == nil))
			resMu.Unlock()
		}))
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()

	a, b, gone := testPod("a"), testPod("b"), testPod("gone")
	r.Status(ctx, a, msg("a1"))
	r.Status(ctx, a, msg("a2")) // replaces a1
	r.Status(ctx, b, msg("b1"))
	r.Reclaimed(ctx, b)
	r.Status(ctx, gone, msg("g1"))
	r.Forget(gone.UID)
	if n := r.Waiting(); n != 2 {
		t.Fatalf("waiting = %d, want 2 (a and b)", n)
	}
	// Still down: a round fails and everything keeps waiting.
	resendRound(t, clk, r, st)
	if n := r.Waiting(); n != 2 || len(st.taken()) != 0 {
		t.Fatalf("after a failed round waiting = %d, taken %q; want 2 and nothing", n, st.taken())
	}
	st.set(false)
	resendRound(t, clk, r, st)
	if n := r.Waiting(); n != 0 {
		t.Fatalf("waiting = %d after statusd came back, want 0", n)
	}
	got := st.taken()
	// The pods' order in a round is not fixed; each pod's is.
	if !(fmt.Sprint(got) == fmt.Sprint([]string{"status u-a a2", "status u-b b1", "reclaimed u-b"}) ||
		fmt.Sprint(got) == fmt.Sprint([]string{"status u-b b1", "reclaimed u-b", "status u-a a2"})) {
		t.Fatalf("statusd took %q; want a2 for a, and b1 then the reclaim for b", got)
	}
	resMu.Lock()
	defer resMu.Unlock()
	var failed, ok int
	for _, r := range results {
		if r[len(r)-4:] == "true" {
			ok++
		} else {
			failed++
		}
	}
	// a1, a2, b1, b's reclaim, gone's g1 and two pods in the failed round.
	if failed != 7 || ok != 2 {
		t.Fatalf("results %q: %d failures and %d successes, want 7 and 2", results, failed, ok)
	}
	cancel()
	<-done
}

// TestNewerStatusWins: a status sent while an older one waits replaces
// it, and once statusd takes a status nothing older is resent after it.
func TestNewerStatusWins(t *testing.T) {
	ctx := context.Background()
	st := &downStatusd{down: true}
	r := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	p := testPod("p")
	r.Status(ctx, p, msg("old"))
	st.set(false)
	r.Status(ctx, p, msg("new"))
	if r.Waiting() != 0 {
		t.Fatal("the newer status was taken, yet something waits")
	}
	if r.resendAll(ctx) != true {
		t.Fatal("a resend round with nothing waiting failed")
	}
	sameList(t, "after the newer status", st.taken(), "status u-p new")
}

// TestReclaimOfUnknownPod: statusd answering NotFound to a reclaim report
// (it has finished with the pod) ends it; nothing waits.
func TestReclaimOfUnknownPod(t *testing.T) {
	st := &downStatusd{}
	r := New(st, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	r.Reclaimed(context.Background(), testPod("never-reported"))
	if r.Waiting() != 0 {
		t.Fatal("a reclaim report statusd answered NotFound still waits")
	}
}

// TestNoStatusd: without a statusd client everything is taken and dropped.
func TestNoStatusd(t *testing.T) {
	r := New(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	r.Status(context.Background(), testPod("p"), msg("m"))
	r.Reclaimed(context.Background(), testPod("p"))
	if r.Waiting() != 0 {
		t.Fatal("something waits with no statusd")
	}
}
