package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/store"
)

// statusdOverSocket serves the statusd API from the real server bootstrap
// (grpcserver, its limits included) on a unix socket.
func statusdOverSocket(tb testing.TB) (statusdv1.StatusServiceClient, *cache.Cache) {
	tb.Helper()
	dir := testenv.ShortDir(tb, "sdapi")
	st, err := store.Open(DBPath(dir))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = st.Close() })
	a := &api{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	c := cache.New(st)
	a.open(c)
	tb.Cleanup(a.close)
	cc := servicetest.ServeAPI(tb, filepath.Join(dir, "s.sock"), func(s *grpc.Server) { statusdv1.RegisterStatusServiceServer(s, a) })
	return statusdv1.NewStatusServiceClient(cc), c
}

func podBytes(t *testing.T, uid string, annotation int) []byte {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "default", UID: types.UID("u-" + uid)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	if annotation > 0 {
		pod.Annotations = map[string]string{"big": strings.Repeat("x", annotation)}
	}
	b, err := pod.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A pod as large as podconfig accepts (its manifest up to 10 MiB) has its
// status taken, not refused by gRPC's default 4 MiB receive limit on every
// resend.
func TestLargePodStatusTaken(t *testing.T) {
	c, _ := statusdOverSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, _ := (&corev1.PodStatus{Phase: corev1.PodRunning}).Marshal()
	pb := podBytes(t, "big", 6<<20)
	if _, err := c.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: pb, Status: sb}); err != nil {
		t.Fatalf("SetPodStatus with a %d MiB pod: %v", len(pb)>>20, err)
	}
	got, err := c.GetPodStatus(ctx, &statusdv1.GetPodStatusRequest{PodUid: "u-big"})
	if err != nil || got.GetEntry().GetVersion() != 1 {
		t.Fatalf("GetPodStatus: %v %v", got.GetEntry().GetVersion(), err)
	}
}

// A status over statusd's limit is refused with InvalidArgument naming the
// pod, the size and the limit, and nothing is cached; one at the limit is
// taken.
func TestOversizeStatusRefused(t *testing.T) {
	c, _ := statusdOverSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sized := func(n int) []byte {
		st := &corev1.PodStatus{Phase: corev1.PodRunning}
		b, _ := st.Marshal()
		st.Message = strings.Repeat("x", n-len(b))
		b, _ = st.Marshal()
		st.Message = st.Message[:len(st.Message)-(len(b)-n)] // less the message's tag and length
		b, _ = st.Marshal()
		if len(b) != n {
			t.Fatalf("status of %d bytes, want %d", len(b), n)
		}
		return b
	}
	_, err := c.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: podBytes(t, "huge", 0), Status: sized(DefaultMaxStatusBytes + 1)})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "default/p-huge") ||
		!strings.Contains(err.Error(), strconv.Itoa(DefaultMaxStatusBytes+1)+" bytes") || !strings.Contains(err.Error(), "max_status_bytes") {
		t.Fatalf("a status one byte over the limit: %v, want InvalidArgument naming the pod, the size and max_status_bytes", err)
	}
	if _, err := c.GetPodStatus(ctx, &statusdv1.GetPodStatusRequest{PodUid: "u-huge"}); status.Code(err) != codes.NotFound {
		t.Fatalf("the refused status was cached: %v", err)
	}
	if _, err := c.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: podBytes(t, "huge", 0), Status: sized(DefaultMaxStatusBytes)}); err != nil {
		t.Fatalf("a status at the limit: %v", err)
	}
}

// A watcher that stops reading is dropped once it is a queue's length
// behind: it gets ResourceExhausted saying so after what was already queued,
// and statusd keeps nothing more for it.
func TestSlowWatcherDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of fsynced status changes")
	}
	c, cch := statusdOverSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb, _ := (&corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "docker://1"}}}).Marshal()
	if _, err := c.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: podBytes(t, "w", 0), Status: sb}); err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchPodStatuses(ctx, &statusdv1.WatchPodStatusesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Recv(); err != nil || !ev.GetSnapshot() {
		t.Fatalf("snapshot: %v %v", ev, err)
	}
	if n := cch.Watchers(); n != 1 {
		t.Fatalf("watchers = %d, want 1", n)
	}
	// Change the status until statusd gives up on the watcher that does not
	// read. gRPC's flow-control windows hold some events first, so the
	// number of changes needed is not fixed; the bound only stops a broken
	// statusd from looping forever.
	changes := 0
	for ready := true; cch.Watchers() > 0; ready = !ready {
		if changes > 50*cache.WatchBuffer {
			t.Fatalf("watcher still kept after %d changes it did not read", changes)
		}
		if _, err := c.SetContainerReadiness(ctx, &statusdv1.SetContainerReadinessRequest{PodUid: "u-w", ContainerId: "docker://1", Ready: ready}); err != nil {
			t.Fatal(err)
		}
		changes++
	}
	if changes <= cache.WatchBuffer {
		t.Fatalf("dropped after %d changes, before its queue of %d was full", changes, cache.WatchBuffer)
	}
	got := 0
	for {
		_, err := w.Recv()
		if err == nil {
			got++
			continue
		}
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "fell behind") {
			t.Fatalf("after %d events: %v, want ResourceExhausted saying the watcher fell behind", got, err)
		}
		break
	}
	if got >= changes {
		t.Fatalf("slow watcher got all %d changes; nothing was dropped", changes)
	}
	t.Logf("%d changes, watcher dropped after; %d delivered before the error", changes, got)
}
