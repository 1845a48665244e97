package syncloop

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/testenv"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// limitedStatusd refuses statuses larger than limit bytes, as statusd does.
type limitedStatusd struct {
	statusdv1.StatusServiceClient
	limit int
	mu    sync.Mutex
	calls int
}

func (s *limitedStatusd) SetPodStatus(_ context.Context, req *statusdv1.SetPodStatusRequest, _ ...grpc.CallOption) (*statusdv1.SetPodStatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if len(req.GetStatus()) > s.limit {
		return nil, status.Errorf(codes.InvalidArgument, "status is %d bytes, over statusd's limit of %d", len(req.GetStatus()), s.limit)
	}
	return &statusdv1.SetPodStatusResponse{}, nil
}

func (s *limitedStatusd) callCount() int { s.mu.Lock(); defer s.mu.Unlock(); return s.calls }

// TestRefusedStatusHeldUntilItChanges: a status statusd refuses as invalid
// is sent once, said once (naming the pod and the size) and counted once,
// however many syncs report it; a changed status is sent again, and one
// statusd takes ends the hold.
func TestRefusedStatusHeldUntilItChanges(t *testing.T) {
	var out logLines
	log := out.logger()
	reg := prometheus.NewRegistry()
	rt := &flakyRuntime{}
	st := &limitedStatusd{limit: 4096}
	rm := podruntime.NewManager(rt, rt, podruntime.Options{LogRoot: t.TempDir(), Log: log})
	l := New(log, rm, rt, nil, st, nil, Options{Registerer: reg})
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "ns", UID: "u-big"}}
	huge := func(msg string) *corev1.PodStatus {
		return &corev1.PodStatus{Phase: corev1.PodRunning, Message: msg + strings.Repeat("x", 8192)}
	}
	refused := func() float64 {
		t.Helper()
		m, err := testenv.GatherMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("microlet_podsyncd_status_refused_total", nil)
	}

	for range 5 {
		l.report(ctx, pod, huge("a"))
	}
	said, _ := out.take()
	sameLines(t, "one oversize status, five syncs", said, "WARN statusd refused the pod's status; it is not sent again until it changes")
	if !strings.Contains(out.String(), "pod=ns/big") || !strings.Contains(out.String(), "statusBytes=") {
		t.Fatalf("the warning does not name the pod and the size:\n%s", out.String())
	}
	if n, c := refused(), st.callCount(); n != 1 || c != 1 {
		t.Fatalf("refused %v, statusd calls %d; want 1 and 1", n, c)
	}
	if n := failureCount(t, reg, stepStatusReport); n != 0 {
		t.Fatalf("status_report failures = %v, want 0 (a refusal is counted as such)", n)
	}

	// Changed, still too large: sent once more, counted, said at debug.
	for range 3 {
		l.report(ctx, pod, huge("b"))
	}
	said, debug := out.take()
	sameLines(t, "a second oversize status", said)
	if debug != 1 || refused() != 2 || st.callCount() != 2 {
		t.Fatalf("debug lines %d, refused %v, calls %d; want 1, 2, 2", debug, refused(), st.callCount())
	}

	// Small enough: taken, the hold ends, every sync sends again.
	l.report(ctx, pod, &corev1.PodStatus{Phase: corev1.PodRunning})
	l.report(ctx, pod, &corev1.PodStatus{Phase: corev1.PodRunning})
	said, _ = out.take()
	sameLines(t, "taken again", said, "INFO statusd takes the pod's status again")
	if c := st.callCount(); c != 4 {
		t.Fatalf("statusd calls %d, want 4", c)
	}
	// The same oversize status as at first is sent again: the hold was
	// for the pod's last refused status only.
	l.report(ctx, pod, huge("a"))
	if c := st.callCount(); c != 5 || refused() != 3 {
		t.Fatalf("statusd calls %d refused %v, want 5 and 3", c, refused())
	}
}
