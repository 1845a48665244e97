package containergc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

// listOnly is a runtime that answers the two lists a pass starts with;
// a pass over a node in its steady state removes nothing.
type listOnly struct {
	criapi.RuntimeService
	cs  []*runtimeapi.Container
	sbs []*runtimeapi.PodSandbox
}

func (l *listOnly) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return l.cs, nil
}

func (l *listOnly) ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error) {
	return l.sbs, nil
}

// BenchmarkPass110Pods is one container GC pass on a node with 110 pods of
// 3 containers, each with a running instance and its kept dead one (660
// containers, 110 sandboxes, 110 pod log dirs), in its steady state: the
// policy and the log-dir scan, without the CRI round trips.
func BenchmarkPass110Pods(b *testing.B) {
	now := time.Now()
	rt := &listOnly{}
	logs := b.TempDir()
	uids := map[types.UID]bool{}
	for p := range 110 {
		uid := fmt.Sprintf("uid-%03d", p)
		uids[types.UID(uid)] = true
		rt.sbs = append(rt.sbs, &runtimeapi.PodSandbox{Id: "sb-" + uid, State: runtimeapi.PodSandboxState_SANDBOX_READY,
			CreatedAt: now.Add(-time.Hour).UnixNano(), Metadata: &runtimeapi.PodSandboxMetadata{Uid: uid}})
		if err := os.Mkdir(filepath.Join(logs, "default_pod-"+uid+"_"+uid), 0o755); err != nil {
			b.Fatal(err)
		}
		for c := range 3 {
			for i, st := range []runtimeapi.ContainerState{runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING} {
				rt.cs = append(rt.cs, &runtimeapi.Container{
					Id: fmt.Sprintf("%s-%d-%d", uid, c, i), PodSandboxId: "sb-" + uid, State: st,
					CreatedAt: now.Add(-time.Duration(10-i) * time.Minute).UnixNano(),
					Metadata:  &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", c)}, Labels: map[string]string{kubelettypes.KubernetesPodUIDLabel: uid},
				})
			}
		}
	}
	gc := New(rt, DefaultPolicy(), Options{PodLogsDir: logs, Clock: testclock.NewFakeClock(now), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	gone := func(uid types.UID) bool { return !uids[uid] }
	b.ReportAllocs()
	for b.Loop() {
		res, err := gc.GarbageCollect(context.Background(), gone)
		if err != nil || res.Containers+res.Sandboxes+res.LogDirs != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
