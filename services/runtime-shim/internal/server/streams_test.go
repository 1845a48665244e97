package server_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// chanWriter hands each write to a channel, so the test reads stream
// output as it arrives without sharing a buffer between goroutines.
type chanWriter chan []byte

func (c chanWriter) Write(p []byte) (int, error) {
	c <- append([]byte(nil), p...)
	return len(p), nil
}

// waitFor reads from c until the output contains want or 60 s pass.
func (c chanWriter) waitFor(want string) error {
	deadline := time.After(60 * time.Second)
	var got []byte
	for {
		select {
		case p := <-c:
			got = append(got, p...)
			if bytes.Contains(got, []byte(want)) {
				return nil
			}
		case <-deadline:
			return fmt.Errorf("no %q in %q", want, got)
		}
	}
}

// runPod starts a sandbox with one container and returns both IDs.
func runPod(t *testing.T, sh *shimtest.Shim, env *shimtest.Env, name, image string, cmd []string, stdin bool) (string, string) {
	ctx := ctxT(t, 3*time.Minute)
	get(sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}})).must(t)
	pc := podConfig(name, t.TempDir())
	sb := get(sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})).must(t)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = sh.Runtime.RemovePodSandbox(cctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.PodSandboxId})
	})
	c := get(sh.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: cmd, Stdin: stdin, LogPath: "c.log"}})).must(t)
	get(sh.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)
	return sb.PodSandboxId, c.ContainerId
}

func executor(t *testing.T, rawURL string) remotecommand.Executor {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := remotecommand.NewSPDYExecutor(&restclient.Config{}, http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	return ex
}

func testStreams(t *testing.T, env *shimtest.Env, sh *shimtest.Shim) {
	ctx := ctxT(t, 5*time.Minute)
	busybox := env.Registry.Image(registry.Busybox)
	_, cid := runPod(t, sh, env, "streams-"+strings.ToLower(t.Name()[len(t.Name())-3:]), busybox,
		[]string{"sh", "-c", "while true; do echo tick; sleep 1; done"}, false)

	t.Run("Exec", func(t *testing.T) {
		resp := get(sh.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: cid, Cmd: []string{"sh", "-c", "read x; echo out-$x; echo err >&2; exit 7"},
			Stdin: true, Stdout: true, Stderr: true})).must(t)
		var stdout, stderr bytes.Buffer
		err := executor(t, resp.Url).StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("in\n"), Stdout: &stdout, Stderr: &stderr})
		var ee utilexec.ExitError
		if !errors.As(err, &ee) || ee.ExitStatus() != 7 {
			t.Fatalf("exec error = %v, want exit status 7", err)
		}
		if stdout.String() != "out-in\n" || stderr.String() != "err\n" {
			t.Fatalf("stdout %q stderr %q", stdout.String(), stderr.String())
		}
	})

	t.Run("Attach", func(t *testing.T) {
		resp := get(sh.Runtime.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: cid, Stdout: true, Stderr: true})).must(t)
		actx, cancel := context.WithCancel(ctx)
		out := make(chanWriter, 4096)
		done := make(chan error, 1)
		go func() {
			done <- executor(t, resp.Url).StreamWithContext(actx, remotecommand.StreamOptions{Stdout: out, Stderr: io.Discard})
		}()
		err := out.waitFor("tick")
		cancel()
		if serr := <-done; serr != nil {
			t.Logf("attach stream ended: %v", serr)
		}
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("PortForward", func(t *testing.T) {
		sbID, webID := runPod(t, sh, env, "pf-"+strings.ToLower(t.Name()[len(t.Name())-3:]), env.Registry.Image(registry.WebServer), nil, false)
		// client-go's forwarder gives up on its first failed stream, so
		// wait until the server listens before forwarding.
		eventually(t, "web server up", func() error {
			r, err := sh.Runtime.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: webID, Cmd: []string{"wget", "-q", "-O", "-", "http://127.0.0.1:80/"}, Timeout: 10})
			if err != nil {
				return err
			}
			if r.ExitCode != 0 {
				return fmt.Errorf("wget exit %d: %s", r.ExitCode, r.Stderr)
			}
			return nil
		})
		resp := get(sh.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sbID, Port: []int32{80}})).must(t)
		u, err := url.Parse(resp.Url)
		if err != nil {
			t.Fatal(err)
		}
		rt, up, err := spdy.RoundTripperFor(&restclient.Config{})
		if err != nil {
			t.Fatal(err)
		}
		dialer := spdy.NewDialer(up, &http.Client{Transport: rt}, http.MethodPost, u)
		stop, ready := make(chan struct{}), make(chan struct{})
		pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:80"}, stop, ready, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		errCh := make(chan error, 1)
		go func() { errCh <- pf.ForwardPorts() }()
		defer func() {
			close(stop)
			if err := <-errCh; err != nil {
				t.Logf("port forward ended: %v", err)
			}
		}()
		select {
		case <-ready:
		case err := <-errCh:
			t.Fatalf("port forward: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("port forward not ready")
		}
		ports, err := pf.GetPorts()
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "page through the forwarded port", func() error {
			r, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", ports[0].Local))
			if err != nil {
				return err
			}
			defer r.Body.Close()
			b, _ := io.ReadAll(r.Body)
			if !strings.Contains(string(b), "Welcome to nginx!") {
				return fmt.Errorf("page %q", b)
			}
			return nil
		})
	})
}

func TestStreamsDocker(t *testing.T) {
	env := shimtest.Get(t)
	testStreams(t, env, env.StartShim(t))
}

func TestStreamsThroughForwarder(t *testing.T) {
	env := shimtest.Get(t)
	up := env.StartShim(t)
	testStreams(t, env, env.StartShim(t, "--backend=forward", "--forward-endpoint="+up.Endpoint))
}

// TestContainerEvents checks the GetContainerEvents stream podsyncd's PLEG
// uses: create, start, stop and delete of a container arrive in order, through
// the forwarder as well.
func TestContainerEvents(t *testing.T) {
	env := shimtest.Get(t)
	up := env.StartShim(t)
	fw := env.StartShim(t, "--backend=forward", "--forward-endpoint="+up.Endpoint)
	ctx := ctxT(t, 3*time.Minute)
	stream := get(fw.Runtime.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})).must(t)
	// The stream is open once the first message or header arrives; give
	// Docker's event subscription a moment by waiting on the header.
	if _, err := stream.Header(); err != nil {
		t.Fatal(err)
	}
	sbID, cid := runPod(t, fw, env, "events", env.Registry.Image(registry.Busybox), []string{"sleep", "3600"}, false)
	get(fw.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: cid, Timeout: 1})).must(t)
	get(fw.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: cid})).must(t)
	want := []runtimeapi.ContainerEventType{
		runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT,
		runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT,
	}
	var got []runtimeapi.ContainerEventType
	for len(got) < len(want) {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("events so far %v: %v", got, err)
		}
		if ev.ContainerId != cid {
			continue
		}
		if ev.ContainerEventType != runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT && ev.PodSandboxStatus.GetId() != sbID {
			t.Errorf("%v event without its sandbox status", ev.ContainerEventType)
		}
		got = append(got, ev.ContainerEventType)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events = %v, want %v", got, want)
		}
	}
}
