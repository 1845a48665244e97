package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// TestContainerNameAcrossSandboxes: a container's Docker name is its pod's
// and its attempt's, as dockershim named it. Creating it again in the same
// sandbox answers the existing container (a retried call); in a newer
// sandbox of the same pod it is AlreadyExists, never the old sandbox's
// container.
func TestContainerNameAcrossSandboxes(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, 3*time.Minute)
	rt := sh.Runtime
	image := env.Registry.Image(registry.Busybox)
	get(sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)
	sandbox := func(attempt uint32) (string, *runtimeapi.PodSandboxConfig) {
		pc := podConfig("names", t.TempDir())
		pc.Metadata.Attempt = attempt
		id := get(rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t).PodSandboxId
		t.Cleanup(func() {
			cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = rt.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
		})
		return id, pc
	}
	create := func(sb string, pc *runtimeapi.PodSandboxConfig) (*runtimeapi.CreateContainerResponse, error) {
		return rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, SandboxConfig: pc, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "c", Attempt: 0}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: []string{"true"}, LogPath: "c.log",
		}})
	}
	old, oldPC := sandbox(0)
	first := get(create(old, oldPC)).must(t)
	if again := get(create(old, oldPC)).must(t); again.ContainerId != first.ContainerId {
		t.Errorf("a repeated create in the same sandbox made %s, want the existing %s", again.ContainerId, first.ContainerId)
	}
	get(rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: old})).must(t)
	newer, newerPC := sandbox(1)
	_, err := create(newer, newerPC)
	wantCode(t, err, codes.AlreadyExists, "the same container name in a newer sandbox")
}
