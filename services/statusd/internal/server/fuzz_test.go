package server

import (
	"context"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// fuzzMethods are statusd's unary RPCs the fuzz target calls, by the
// target's method argument; fuzzCalls makes the calls in the same order.
// New methods go at the end, so the committed seeds keep their method.
var fuzzMethods = []string{"SetPodStatus", "SetContainerReadiness", "SetContainerStartup", "TerminatePod", "ReportPodResourcesReclaimed", "GetPodStatus",
	"RemoveOrphanedStatuses", "ListPodStatuses", "WatchPodStatuses"}

// watchMethod is WatchPodStatuses' index in fuzzMethods.
const watchMethod = 8

func fuzzCalls(c statusdv1.StatusServiceClient) []func(context.Context, []byte) error {
	return []func(context.Context, []byte) error{
		servicetest.FuzzCall(c.SetPodStatus),
		servicetest.FuzzCall(c.SetContainerReadiness),
		servicetest.FuzzCall(c.SetContainerStartup),
		servicetest.FuzzCall(c.TerminatePod),
		servicetest.FuzzCall(c.ReportPodResourcesReclaimed),
		servicetest.FuzzCall(c.GetPodStatus),
		servicetest.FuzzCall(c.RemoveOrphanedStatuses),
		servicetest.FuzzCall(c.ListPodStatuses),
		servicetest.FuzzFirst(c.WatchPodStatuses),
	}
}

// FuzzStatusdAPI sends arbitrary requests to statusd's handlers on a real
// server (grpcserver, its interceptors, a unix socket, a bbolt store). No
// request may panic (recovery would answer Internal), hang past the
// deadline, or get an answer other than success or a code naming the
// caller's mistake or the state asked about. A watch's first message is
// the snapshot's first entry, so the target keeps one pod's status (the
// anchor) cached before it opens a watch: RemoveOrphanedStatuses may have
// dropped everything.
func FuzzStatusdAPI(f *testing.F) {
	c, _ := statusdOverSocket(f)
	calls := fuzzCalls(c)
	anchor := fuzzAnchor(f)
	// The seeds are testdata/fuzz/FuzzStatusdAPI (TestWriteFuzzSeeds).
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		i := int(method) % len(calls)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if i == watchMethod {
			if _, err := c.SetPodStatus(ctx, anchor); err != nil && status.Code(err) != codes.InvalidArgument {
				t.Fatalf("anchor status: %v", err)
			}
		}
		err := calls[i](ctx, data)
		switch status.Code(err) {
		case codes.OK, codes.InvalidArgument, codes.NotFound, codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		default:
			t.Fatalf("%s(%x): %v", fuzzMethods[i], data, err)
		}
	})
}

// fuzzAnchor is the status FuzzStatusdAPI keeps cached for its watches,
// of a pod no seed names.
func fuzzAnchor(tb testing.TB) *statusdv1.SetPodStatusRequest {
	pb, err := (&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "anchor", Namespace: "default", UID: "anchor"}}).Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	sb, err := (&corev1.PodStatus{Phase: corev1.PodPending}).Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return &statusdv1.SetPodStatusRequest{Pod: pb, Status: sb}
}

type fuzzSeed struct {
	method uint8
	data   []byte
}

// fuzzSeeds are the requests podsyncd sends in a pod's life (the same
// shapes as TestAPIStandaloneOverSocket's), one per method.
func fuzzSeeds(tb testing.TB) []fuzzSeed {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "u1"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	pb, err := pod.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	sb, err := (&corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", ContainerID: "docker://1"}}}).Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	reqs := []proto.Message{
		&statusdv1.SetPodStatusRequest{Pod: pb, Status: sb},
		&statusdv1.SetContainerReadinessRequest{PodUid: "u1", ContainerId: "docker://1", Ready: true},
		&statusdv1.SetContainerStartupRequest{PodUid: "u1", ContainerId: "docker://1", Started: true},
		&statusdv1.TerminatePodRequest{Pod: pb},
		&statusdv1.ReportPodResourcesReclaimedRequest{PodUid: "u1"},
		&statusdv1.GetPodStatusRequest{PodUid: "u1"},
		&statusdv1.RemoveOrphanedStatusesRequest{KeepPodUids: []string{"u1"}},
		&statusdv1.ListPodStatusesRequest{},
		&statusdv1.WatchPodStatusesRequest{},
	}
	out := make([]fuzzSeed, 0, len(reqs))
	for i, r := range reqs {
		b, err := proto.Marshal(r)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, fuzzSeed{uint8(i), b})
	}
	return out
}

// TestWriteFuzzSeeds writes fuzzSeeds as the committed corpus in
// testdata/fuzz/FuzzStatusdAPI (with MICROLET_WRITE_FUZZ_SEEDS=1), so
// `go test` replays them without the fuzzer.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("MICROLET_WRITE_FUZZ_SEEDS") == "" {
		t.Skip("set MICROLET_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz/FuzzStatusdAPI")
	}
	for _, s := range fuzzSeeds(t) {
		testenv.WriteFuzzSeed(t, "FuzzStatusdAPI", fuzzMethods[s.method], s.method, s.data)
	}
}
