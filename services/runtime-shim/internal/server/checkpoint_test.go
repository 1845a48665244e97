package server_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// TestSandboxAfterDockerLostIt removes a sandbox's pause container behind the
// shim's back: the checkpoint keeps the sandbox visible as NOTREADY, and stop
// and remove still clean it up.
func TestSandboxAfterDockerLostIt(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, 3*time.Minute)
	pc := podConfig("lost", t.TempDir())
	sb := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	if _, err := env.Docker.ContainerRemove(ctx, sb.PodSandboxId, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	st := get(sh.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.Metadata.GetName() != "lost" || st.Status.Labels["app"] != "lost" {
		t.Fatalf("status after Docker lost the sandbox: %+v", st.Status)
	}
	list := get(sh.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: sb.PodSandboxId}})).must(t)
	if len(list.Items) != 1 || list.Items[0].State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("ListPodSandbox = %v", list.Items)
	}
	get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	get(sh.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	_, err := sh.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
	wantCode(t, err, codes.NotFound, "status after remove")
}

// TestRetriedSandboxGetsItsCheckpoint: a shim killed between creating a
// sandbox's pause container and writing its checkpoint leaves a container
// with none (test/faults makes that happen for real). The retried
// RunPodSandbox finds the container by name and writes the checkpoint, so
// the sandbox stays visible, stoppable and removable once Docker loses the
// container.
func TestRetriedSandboxGetsItsCheckpoint(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, 3*time.Minute)
	pc := podConfig("retried", t.TempDir())
	sb := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	// The state a kill mid-create leaves: a stopped container, no checkpoint.
	if _, err := env.Docker.ContainerStop(ctx, sb.PodSandboxId, client.ContainerStopOptions{}); err != nil {
		t.Fatal(err)
	}
	found, _ := filepath.Glob(filepath.Join(sh.DataDir, "*", "sandboxes", sb.PodSandboxId+".json"))
	if len(found) != 1 {
		t.Fatalf("checkpoints of %s under %s: %v, want one", sb.PodSandboxId, sh.DataDir, found)
	}
	ckpt := found[0]
	if err := os.Remove(ckpt); err != nil {
		t.Fatal(err)
	}
	again := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	if again.PodSandboxId != sb.PodSandboxId {
		t.Fatalf("retried RunPodSandbox made %s, want the existing %s", again.PodSandboxId, sb.PodSandboxId)
	}
	if _, err := os.Stat(ckpt); err != nil {
		t.Fatalf("no checkpoint after the retry: %v", err)
	}
	if _, err := env.Docker.ContainerRemove(ctx, sb.PodSandboxId, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	st := get(sh.Runtime.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	if st.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY || st.Status.Metadata.GetName() != "retried" {
		t.Fatalf("status after Docker lost the retried sandbox: %+v", st.Status)
	}
	get(sh.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	get(sh.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
}
