package server_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// TestRuntimeHandlers checks RuntimeClass handlers on this host's Docker:
// Status lists the default handler and each of the daemon's runtimes whose
// name is a DNS label (what a RuntimeClass handler can be); a
// sandbox run with a named runtime, and every container created in it, is
// a Docker container of that runtime and runs; a handler the daemon has no
// runtime for is refused with InvalidArgument naming it, and leaves no
// sandbox behind.
func TestRuntimeHandlers(t *testing.T) {
	ctx, sh, image := busyboxShim(t, 5*time.Minute)
	env := shimtest.Get(t)
	rt := sh.Runtime

	info, err := env.Docker.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var daemon, labels []string
	for name := range info.Info.Runtimes {
		daemon = append(daemon, name)
		if len(validation.IsDNS1123Label(name)) == 0 {
			labels = append(labels, name)
		}
	}
	slices.Sort(daemon)
	slices.Sort(labels)
	st := get(rt.Status(ctx, &runtimeapi.StatusRequest{})).must(t)
	var listed []string
	for _, h := range st.RuntimeHandlers {
		if h.GetFeatures() == nil {
			t.Errorf("handler %q has no features", h.Name)
		}
		listed = append(listed, h.Name)
	}
	if want := append([]string{""}, labels...); !slices.Equal(listed, want) {
		t.Fatalf("Status handlers = %q, want the default and the daemon's runtimes a RuntimeClass can name %q", listed, want)
	}

	// A runtime other than the daemon's default where there is one, so the
	// check sees the handler and not the default (a CRI client may name any
	// of the daemon's runtimes, listed or not).
	handler := daemon[0]
	for _, name := range daemon {
		if name != info.Info.DefaultRuntime {
			handler = name
			break
		}
	}
	t.Logf("daemon runtimes %q (default %q); running a pod with handler %q", daemon, info.Info.DefaultRuntime, handler)

	pc := podConfig("handler", t.TempDir())
	sb := get(rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc, RuntimeHandler: handler})).must(t).PodSandboxId
	t.Cleanup(func() { _, _ = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb}) })
	if got := get(rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb})).must(t).GetStatus().GetRuntimeHandler(); got != handler {
		t.Errorf("sandbox status runtime handler = %q, want %q", got, handler)
	}
	items := get(rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{Id: sb}})).must(t).Items
	if len(items) != 1 || items[0].RuntimeHandler != handler {
		t.Errorf("ListPodSandbox = %v, want the sandbox with handler %q", items, handler)
	}
	ctr := get(rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, SandboxConfig: pc, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"}, Image: &runtimeapi.ImageSpec{Image: image},
		Command: []string{"sleep", "3600"},
	}})).must(t).ContainerId
	get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: ctr})).must(t)
	for what, id := range map[string]string{"sandbox": sb, "container": ctr} {
		ins, err := env.Docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ins.Container.HostConfig.Runtime; got != handler {
			t.Errorf("%s's Docker runtime = %q, want %q", what, got, handler)
		}
		if !ins.Container.State.Running {
			t.Errorf("%s is not running: %+v", what, ins.Container.State)
		}
	}

	bad := podConfig("nohandler", t.TempDir())
	_, err = rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: bad, RuntimeHandler: "no-such-runtime"})
	wantCode(t, err, codes.InvalidArgument, "RunPodSandbox with an unknown handler")
	if !strings.Contains(err.Error(), `"no-such-runtime"`) {
		t.Errorf("error %q does not name the handler", err)
	}
	left := get(rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{"app": "nohandler"},
	}})).must(t)
	if len(left.Items) != 0 {
		t.Errorf("a refused sandbox was left: %v", left.Items)
	}
}
