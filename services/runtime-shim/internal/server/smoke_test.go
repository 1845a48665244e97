package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// result carries a call's two results so one line can check them: get(call()).must(t).
type result[T any] struct {
	v   T
	err error
}

func get[T any](v T, err error) result[T] { return result[T]{v, err} }

func (r result[T]) must(t *testing.T) T {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.v
}

func wantCode(t *testing.T, err error, code codes.Code, what string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: got %v, want code %s", what, err, code)
	}
}

// eventually polls f until it returns nil, for up to 60*time.Second.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	testenv.Eventually(t, what, 60*time.Second, f)
}

// busyboxShim starts a shim with the local registry's busybox pulled, and a
// context for the test's calls.
func busyboxShim(t *testing.T, limit time.Duration) (context.Context, *shimtest.Shim, string) {
	t.Helper()
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, limit)
	image := env.Registry.Image(registry.Busybox)
	get(sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)
	return ctx, sh, image
}

// runSandbox runs a sandbox of pc, removed when the test ends.
func runSandbox(ctx context.Context, t *testing.T, rt runtimeapi.RuntimeServiceClient, pc *runtimeapi.PodSandboxConfig) string {
	t.Helper()
	id := get(rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t).PodSandboxId
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = rt.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
	})
	return id
}

func podConfig(name, logDir string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "smoke", Uid: name + "-uid", Attempt: 0},
		Hostname:     name,
		LogDirectory: logDir,
		Labels:       map[string]string{"app": name},
		Annotations:  map[string]string{"note": "smoke"},
		DnsConfig:    &runtimeapi.DNSConfig{Servers: []string{"10.10.10.10"}, Searches: []string{"example.test"}, Options: []string{"ndots:3"}},
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
}

// smoke is crictl's everyday path — runp, pull, create, start, ps, inspect,
// exec, logs, stop, rm — over the shim's real socket.
func smoke(t *testing.T, env *shimtest.Env, sh *shimtest.Shim, name string) {
	ctx := ctxT(t, 5*time.Minute)
	rt, im := sh.Runtime, sh.Image

	v := get(rt.Version(ctx, &runtimeapi.VersionRequest{})).must(t)
	if v.RuntimeName != "docker" || v.RuntimeApiVersion != "v1" || v.RuntimeVersion == "" {
		t.Fatalf("Version = %+v", v)
	}
	st := get(rt.Status(ctx, &runtimeapi.StatusRequest{})).must(t)
	for _, c := range st.Status.Conditions {
		if !c.Status {
			t.Fatalf("condition %s false: %s", c.Type, c.Message)
		}
	}

	image := env.Registry.Image(registry.Busybox)
	pulled := get(im.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)
	is := get(im.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)
	if is.Image == nil || is.Image.Id != pulled.ImageRef {
		t.Fatalf("ImageStatus = %+v, pulled %s", is.Image, pulled.ImageRef)
	}

	logDir := filepath.Join(env.Dir, "logs", name)
	pc := podConfig(name, logDir)
	sb := get(rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	again := get(rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	if again.PodSandboxId != sb.PodSandboxId {
		t.Fatalf("RunPodSandbox not idempotent: %s then %s", sb.PodSandboxId, again.PodSandboxId)
	}
	ps := get(rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	if ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_READY || ps.Status.Network.GetIp() == "" || ps.Status.Labels["app"] != name {
		t.Fatalf("PodSandboxStatus = %+v", ps.Status)
	}

	cc := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "main"},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  []string{"sh", "-c", "echo hello-$GREETING; echo oops >&2; exec sleep 3600"},
		Envs:     []*runtimeapi.KeyValue{{Key: "GREETING", Value: []byte("world")}},
		LogPath:  "main/0.log",
		Labels:   map[string]string{"role": "main"},
	}
	c := get(rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: cc, SandboxConfig: pc})).must(t)
	get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)

	// ps
	list := get(rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		PodSandboxId: sb.PodSandboxId, LabelSelector: map[string]string{"role": "main"},
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
	}})).must(t)
	if len(list.Containers) != 1 || list.Containers[0].Id != c.ContainerId {
		t.Fatalf("ListContainers = %v", list.Containers)
	}
	// inspect
	cs := get(rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})).must(t)
	if cs.Status.State != runtimeapi.ContainerState_CONTAINER_RUNNING || cs.Status.StartedAt == 0 || cs.Status.LogPath != filepath.Join(logDir, "main/0.log") {
		t.Fatalf("ContainerStatus = %+v", cs.Status)
	}
	// exec
	ex := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"sh", "-c", "cat /etc/resolv.conf; hostname; exit 3"}, Timeout: 30})).must(t)
	if ex.ExitCode != 3 || !strings.Contains(string(ex.Stdout), "10.10.10.10") || !strings.Contains(string(ex.Stdout), name) {
		t.Fatalf("ExecSync = %d %q %q", ex.ExitCode, ex.Stdout, ex.Stderr)
	}
	// logs
	eventually(t, "CRI log lines", func() error {
		b, err := os.ReadFile(cs.Status.LogPath)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), " stdout F hello-world\n") || !strings.Contains(string(b), " stderr F oops\n") {
			return fmt.Errorf("log is %q", b)
		}
		return nil
	})
	// stop
	get(rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.ContainerId, Timeout: 1})).must(t)
	cs = get(rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})).must(t)
	if cs.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED || cs.Status.FinishedAt == 0 || cs.Status.Reason == "" {
		t.Fatalf("after stop: %+v", cs.Status)
	}
	// rm
	get(rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ContainerId})).must(t)
	get(rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.ContainerId})).must(t)
	_, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: c.ContainerId})
	wantCode(t, err, codes.NotFound, "status of removed container")

	get(rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	ps = get(rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	if ps.Status.State != runtimeapi.PodSandboxState_SANDBOX_NOTREADY {
		t.Fatalf("after stopp: %v", ps.Status.State)
	}
	get(rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	get(rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	get(rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})).must(t)
	_, err = rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: sb.PodSandboxId})
	wantCode(t, err, codes.NotFound, "status of removed sandbox")
}

func TestSmokeDocker(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	smoke(t, env, sh, "smoke-docker")
}

func TestSmokeThroughForwarder(t *testing.T) {
	env := shimtest.Get(t)
	up := env.StartShim(t)
	fw := env.StartShim(t, "--backend=forward", "--forward-endpoint="+up.Endpoint)
	smoke(t, env, fw, "smoke-forward")
}

func TestErrorCodes(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, time.Minute)
	rt := sh.Runtime
	_, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{}})
	wantCode(t, err, codes.InvalidArgument, "RunPodSandbox without metadata")
	if !strings.Contains(status.Convert(err).Message(), "config.metadata") {
		t.Errorf("message does not name the field: %v", err)
	}
	_, err = rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: "nope", Config: &runtimeapi.ContainerConfig{}})
	wantCode(t, err, codes.InvalidArgument, "CreateContainer without metadata")
	_, err = rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: strings.Repeat("0", 64), Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "x"}, Image: &runtimeapi.ImageSpec{Image: "x"}}})
	wantCode(t, err, codes.NotFound, "CreateContainer in unknown sandbox")
	for what, call := range map[string]func() error{
		"ContainerStatus": func() error {
			_, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "deadbeef0000"})
			return err
		},
		"StartContainer": func() error {
			_, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: "deadbeef0000"})
			return err
		},
		"PodSandboxStatus": func() error {
			_, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: "deadbeef0000"})
			return err
		},
		"ExecSync": func() error {
			_, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: "deadbeef0000", Cmd: []string{"true"}})
			return err
		},
	} {
		wantCode(t, call(), codes.NotFound, what)
	}
	for what, call := range map[string]func() error{
		"StopContainer": func() error {
			_, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: "deadbeef0000"})
			return err
		},
		"RemoveContainer": func() error {
			_, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: "deadbeef0000"})
			return err
		},
		"StopPodSandbox": func() error {
			_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: "deadbeef0000"})
			return err
		},
		"RemovePodSandbox": func() error {
			_, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: "deadbeef0000"})
			return err
		},
	} {
		if err := call(); err != nil {
			t.Errorf("%s of a missing object: %v, want success (idempotent)", what, err)
		}
	}
	is, err := sh.Image.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: env.Registry.Image("absent/image:1")}})
	if err != nil || is.Image != nil {
		t.Errorf("ImageStatus of an absent image = %v, %v; want empty, nil", is, err)
	}
}
