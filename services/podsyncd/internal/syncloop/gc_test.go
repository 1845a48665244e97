package syncloop

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/podruntime"
)

// removals records the removals gcContainers asks for; every other CRI call
// is absent (a nil embedded client panics if gcContainers made one).
type removals struct {
	runtimeapi.RuntimeServiceClient
	containers, sandboxes []string
}

func (r *removals) RemoveContainer(_ context.Context, req *runtimeapi.RemoveContainerRequest, _ ...grpc.CallOption) (*runtimeapi.RemoveContainerResponse, error) {
	r.containers = append(r.containers, req.ContainerId)
	return &runtimeapi.RemoveContainerResponse{}, nil
}

func (r *removals) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest, _ ...grpc.CallOption) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.sandboxes = append(r.sandboxes, req.PodSandboxId)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// TestGCKeepsSandboxesWithContainers: removing a sandbox removes its
// containers, so an old not-ready sandbox goes only once it holds none, as
// upstream's evictSandboxes: the newest exited instance of each container
// (here an ephemeral container that must not start again) keeps its
// sandbox, older instances go, and an empty old sandbox goes.
func TestGCKeepsSandboxesWithContainers(t *testing.T) {
	sandbox := func(id string, created int64, ready bool) *runtimeapi.PodSandbox {
		st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if ready {
			st = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		return &runtimeapi.PodSandbox{Id: id, CreatedAt: created, State: st, Labels: map[string]string{podruntime.LabelPodUID: "u"}}
	}
	container := func(id, sb, name string, created int64, state runtimeapi.ContainerState) *runtimeapi.Container {
		return &runtimeapi.Container{Id: id, PodSandboxId: sb, CreatedAt: created, State: state,
			Labels: map[string]string{podruntime.LabelPodUID: "u", podruntime.LabelContainerName: name}}
	}
	exited, running := runtimeapi.ContainerState_CONTAINER_EXITED, runtimeapi.ContainerState_CONTAINER_RUNNING
	sbs := []*runtimeapi.PodSandbox{sandbox("sb1", 1, false), sandbox("sb2", 2, false), sandbox("sb3", 3, true)}
	cs := []*runtimeapi.Container{
		container("debug", "sb1", "debug", 10, exited),  // the only instance: kept, and sb1 with it
		container("main-0", "sb1", "main", 11, exited),  // older than main-1: removed
		container("main-1", "sb2", "main", 20, exited),  // older than main-2: removed, which empties sb2
		container("main-2", "sb3", "main", 30, exited),  // newest exited main: kept
		container("main-3", "sb3", "main", 31, running), // running: never touched
	}
	rt := &removals{}
	l := &Loop{rt: rt, opts: Options{MaxDeadPerContainer: 1}}
	l.gcContainers(context.Background(), cs, sbs)
	slices.Sort(rt.containers)
	if want := []string{"main-0", "main-1"}; !slices.Equal(rt.containers, want) {
		t.Errorf("removed containers %v, want %v", rt.containers, want)
	}
	if want := []string{"sb2"}; !slices.Equal(rt.sandboxes, want) {
		t.Errorf("removed sandboxes %v, want %v (sb1 still holds debug, sb3 is the newest)", rt.sandboxes, want)
	}
}
