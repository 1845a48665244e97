package podruntime

import (
	"context"
	"sync/atomic"

	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// actionsKey is the context key of an action count.
type actionsKey struct{}

// TrackActions returns a context under which the manager counts the calls
// that change the runtime's state of a pod (create, start, stop, remove,
// update) it makes, failed ones included, and a function reading the count.
// A sync that made none leaves the pod's runtime status as it read it, so
// it need not read it again.
func TrackActions(ctx context.Context) (context.Context, func() int64) {
	n := new(atomic.Int64)
	return context.WithValue(ctx, actionsKey{}, n), n.Load
}

func noteAction(ctx context.Context) {
	if n, ok := ctx.Value(actionsKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
}

// actionCounter is the manager's runtime: every call that changes a pod's
// runtime state is counted in its context (TrackActions) on the way.
type actionCounter struct{ criapi.RuntimeService }

func (r actionCounter) RunPodSandbox(ctx context.Context, config *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	noteAction(ctx)
	return r.RuntimeService.RunPodSandbox(ctx, config, handler)
}

func (r actionCounter) StopPodSandbox(ctx context.Context, id string) error {
	noteAction(ctx)
	return r.RuntimeService.StopPodSandbox(ctx, id)
}

func (r actionCounter) RemovePodSandbox(ctx context.Context, id string) error {
	noteAction(ctx)
	return r.RuntimeService.RemovePodSandbox(ctx, id)
}

func (r actionCounter) CreateContainer(ctx context.Context, sandboxID string, config *runtimeapi.ContainerConfig, sandboxConfig *runtimeapi.PodSandboxConfig) (string, error) {
	noteAction(ctx)
	return r.RuntimeService.CreateContainer(ctx, sandboxID, config, sandboxConfig)
}

func (r actionCounter) StartContainer(ctx context.Context, id string) error {
	noteAction(ctx)
	return r.RuntimeService.StartContainer(ctx, id)
}

func (r actionCounter) StopContainer(ctx context.Context, id string, timeout int64) error {
	noteAction(ctx)
	return r.RuntimeService.StopContainer(ctx, id, timeout)
}

func (r actionCounter) RemoveContainer(ctx context.Context, id string) error {
	noteAction(ctx)
	return r.RuntimeService.RemoveContainer(ctx, id)
}

func (r actionCounter) UpdateContainerResources(ctx context.Context, id string, resources *runtimeapi.ContainerResources) error {
	noteAction(ctx)
	return r.RuntimeService.UpdateContainerResources(ctx, id, resources)
}

func (r actionCounter) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	noteAction(ctx)
	return r.RuntimeService.UpdatePodSandboxResources(ctx, req)
}
