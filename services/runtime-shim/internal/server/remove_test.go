package server_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestConcurrentRemove: CRI removals are idempotent, so callers racing on
// one container or sandbox all succeed, including those that reach Docker
// while it is already removing it (HTTP 409 "removal of container ... is
// already in progress"), and the objects are gone afterwards.
func TestConcurrentRemove(t *testing.T) {
	ctx, sh, image := busyboxShim(t, 5*time.Minute)
	rt := sh.Runtime
	pc := podConfig("remove", t.TempDir())
	sb := runSandbox(ctx, t, rt, pc)
	const callers = 6
	race := func(what string, call func() error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for range callers {
			wg.Go(func() { errs <- call() })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
	}
	start := func(attempt uint32) string {
		id := get(rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, SandboxConfig: pc, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "c", Attempt: attempt}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: []string{"sleep", "3600"}, LogPath: fmt.Sprintf("c-%d.log", attempt),
		}})).must(t).ContainerId
		get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id})).must(t)
		return id
	}
	for attempt := range uint32(5) {
		id := start(attempt)
		race(fmt.Sprintf("RemoveContainer of a running container (attempt %d)", attempt), func() error {
			_, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			return err
		})
		cs := get(rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})).must(t)
		if len(cs.Containers) != 0 {
			t.Fatalf("container %s still listed after its removals: %v", id, cs.Containers)
		}
	}
	start(9)
	race("RemovePodSandbox of a running sandbox with a running container", func() error {
		_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb})
		return err
	})
	if sbs := get(rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: sb}})).must(t); len(sbs.Items) != 0 {
		t.Fatalf("sandbox %s still listed after its removals", sb)
	}
}
