package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/store"
)

// Standalone: the API over a real unix socket, with Watch, List and the
// error codes, and nothing but the local store behind it.
func TestAPIStandaloneOverSocket(t *testing.T) {
	dir := testenv.ShortDir(t, "sdapi")
	st, err := store.Open(DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	a := &api{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	servicetest.Serve(t, filepath.Join(dir, "s.sock"), func(s *grpc.Server) { statusdv1.RegisterStatusServiceServer(s, a) })
	cc, err := grpcclient.Dial("unix://" + filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cc.Close() }()
	c := statusdv1.NewStatusServiceClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if _, err := c.ListPodStatuses(ctx, &statusdv1.ListPodStatusesRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("before the store is loaded: %v", err)
	}
	a.open(cache.New(st))

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	pb, _ := pod.Marshal()
	sb, _ := (&corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "docker://1"}}}).Marshal()
	if _, err := c.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: pb, Status: sb}); err != nil {
		t.Fatal(err)
	}
	w, err := c.WatchPodStatuses(ctx, &statusdv1.WatchPodStatusesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := w.Recv()
	if err != nil || !ev.GetSnapshot() || ev.GetEntry().GetPodUid() != "u1" || ev.GetEntry().GetVersion() != 1 {
		t.Fatalf("snapshot: %v %v", ev, err)
	}
	if r, err := c.SetContainerReadiness(ctx, &statusdv1.SetContainerReadinessRequest{PodUid: "u1", ContainerId: "docker://1", Ready: true}); err != nil || r.GetVersion() != 2 {
		t.Fatalf("readiness: %v %v", r, err)
	}
	ev, err = w.Recv()
	if err != nil || ev.GetSnapshot() || ev.GetEntry().GetVersion() != 2 {
		t.Fatalf("change: %v %v", ev, err)
	}
	got := &corev1.PodStatus{}
	if err := got.Unmarshal(ev.GetEntry().GetStatus()); err != nil || !got.ContainerStatuses[0].Ready {
		t.Fatalf("status in the event: %+v %v", got, err)
	}
	if _, err := c.SetContainerStartup(ctx, &statusdv1.SetContainerStartupRequest{PodUid: "nope", ContainerId: "docker://1"}); status.Code(err) != codes.NotFound {
		t.Fatalf("unknown pod: %v", err)
	}
	if _, err := c.SetContainerStartup(ctx, &statusdv1.SetContainerStartupRequest{PodUid: "u1"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("missing container_id: %v", err)
	}
	if _, err := c.GetPodStatus(ctx, &statusdv1.GetPodStatusRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("missing pod_uid: %v", err)
	}
	if _, err := c.SetPodStatus(ctx, &statusdv1.SetPodStatusRequest{Pod: pb, Status: []byte{0xff}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad status bytes: %v", err)
	}
	rm, err := c.RemoveOrphanedStatuses(ctx, &statusdv1.RemoveOrphanedStatusesRequest{})
	if err != nil || len(rm.GetRemovedPodUids()) != 1 {
		t.Fatalf("remove: %v %v", rm, err)
	}
	ev, err = w.Recv()
	if err != nil || !ev.GetRemoved() || ev.GetEntry().GetPodUid() != "u1" {
		t.Fatalf("removal event: %v %v", ev, err)
	}
	a.close()
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("watch after shutdown: %v", err)
	}
}
