package server_test

import (
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// TestTargetPIDNamespace is what an ephemeral container with
// targetContainerName asks for: NamespaceOption{Pid: TARGET, TargetId}
// joins the target container's PID namespace (Docker's container:<id>),
// so the debugger sees the target's processes as its own PID 1; a
// container of the same pod without TARGET keeps its own namespace. A
// missing, unknown, foreign or stopped target is refused.
func TestTargetPIDNamespace(t *testing.T) {
	env := shimtest.Get(t)
	ctx, sh, image := busyboxShim(t, 5*time.Minute)
	rt := sh.Runtime
	pc := podConfig("target", t.TempDir())
	sbID := runSandbox(ctx, t, rt, pc)

	create := func(name string, ns *runtimeapi.NamespaceOption, sandbox string, cmd ...string) (*runtimeapi.CreateContainerResponse, error) {
		return rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sandbox, SandboxConfig: pc, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: cmd, LogPath: name + ".log",
			Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: ns}},
		}})
	}
	run := func(id string, script string) string {
		t.Helper()
		r := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", script}, Timeout: 30})).must(t)
		if r.ExitCode != 0 {
			t.Fatalf("%s in %s: exit %d, %s%s", script, id, r.ExitCode, r.Stdout, r.Stderr)
		}
		return strings.ReplaceAll(string(r.Stdout), "\x00", " ")
	}
	podNS := func(pid runtimeapi.NamespaceMode, target string) *runtimeapi.NamespaceOption {
		return &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_POD, Ipc: runtimeapi.NamespaceMode_POD, Pid: pid, TargetId: target}
	}

	// The target has a PID namespace of its own (the pod does not share one).
	targetID := get(create("main", podNS(runtimeapi.NamespaceMode_CONTAINER, ""), sbID, "sleep", "3601")).must(t).ContainerId
	get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: targetID})).must(t)

	debug := get(create("debug", podNS(runtimeapi.NamespaceMode_TARGET, targetID), sbID, "sleep", "3602")).must(t)
	ins, err := env.Docker.ContainerInspect(ctx, debug.ContainerId, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(ins.Container.HostConfig.PidMode), "container:"+targetID; got != want {
		t.Errorf("PidMode = %q, want %q", got, want)
	}
	get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: debug.ContainerId})).must(t)
	if got := run(debug.ContainerId, "cat /proc/1/cmdline"); strings.TrimSpace(got) != "sleep 3601" {
		t.Errorf("PID 1 of the TARGET container is %q, want the target's sleep 3601", got)
	}
	if got := run(debug.ContainerId, "ps -o args"); !strings.Contains(got, "sleep 3601") || !strings.Contains(got, "sleep 3602") {
		t.Errorf("ps in the TARGET container does not show both processes:\n%s", got)
	}

	own := get(create("own", podNS(runtimeapi.NamespaceMode_CONTAINER, ""), sbID, "sleep", "3603")).must(t)
	get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: own.ContainerId})).must(t)
	if got := run(own.ContainerId, "cat /proc/1/cmdline"); strings.TrimSpace(got) != "sleep 3603" {
		t.Errorf("PID 1 of a CONTAINER-mode container is %q, want its own sleep 3603", got)
	}

	_, err = create("no-target", podNS(runtimeapi.NamespaceMode_TARGET, ""), sbID)
	wantCode(t, err, codes.InvalidArgument, "TARGET without target_id")
	if err != nil && !strings.Contains(err.Error(), "target_id") {
		t.Errorf("error does not name the field: %v", err)
	}
	_, err = create("unknown-target", podNS(runtimeapi.NamespaceMode_TARGET, "0123456789ab"), sbID)
	wantCode(t, err, codes.NotFound, "TARGET of an unknown container")

	_, otherID := runPod(t, sh, env, "target-other", image, []string{"sleep", "3604"}, false)
	_, err = create("foreign-target", podNS(runtimeapi.NamespaceMode_TARGET, otherID), sbID)
	wantCode(t, err, codes.InvalidArgument, "TARGET in another sandbox")

	get(rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: own.ContainerId, Timeout: 1})).must(t)
	_, err = create("stopped-target", podNS(runtimeapi.NamespaceMode_TARGET, own.ContainerId), sbID)
	wantCode(t, err, codes.FailedPrecondition, "TARGET of a stopped container")
}
