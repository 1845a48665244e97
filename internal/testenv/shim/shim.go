package shim

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"k8s.io/apimachinery/pkg/util/rand"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/registry"
)

// EnvRequire turns a missing Docker into a failure instead of a skip, as
// for every suite `make test` runs.
const EnvRequire = testenv.EnvRequire

// LabelInstance is the label runtime-shim puts on every Docker object with
// its --docker-instance value.
const LabelInstance = "io.microlet.instance"

// patience bounds every wait on Docker; nothing is timed.
const patience = 3 * time.Minute

// Shim is one running runtime-shim.
type Shim struct {
	// Runtime and Images are cri-client services on its socket.
	Runtime criapi.RuntimeService
	Images  criapi.ImageManagerService
	// Busybox is a busybox image, already pulled.
	Busybox string
	// Dir is the socket's directory (Start: a short directory of the
	// test's own).
	Dir string
	// Socket is the CRI socket path.
	Socket string
	// Instance is the Docker instance label value.
	Instance string
}

// Start builds runtime-shim (and the pause program it imports as the pause
// image), starts it on an instance label named after name, waits until it
// serves and pulls busybox from a local registry. Without Docker the test is
// skipped, unless MICROLET_REQUIRE_CONTROLPLANE=1.
func Start(t testing.TB, name string, args ...string) *Shim {
	t.Helper()
	dir := testenv.ShortDir(t, "shm")
	return StartAt(t, filepath.Join(dir, "rt.sock"), name+"-"+rand.String(8), args...)
}

// StartAt is Start with the socket at socket (its directory is
// runtime-shim's run dir) and the Docker instance label instance, both
// chosen by the caller, so other processes can be pointed at them before
// runtime-shim runs.
func StartAt(t testing.TB, socket, instance string, args ...string) *Shim {
	t.Helper()
	dc, err := client.New(client.FromEnv)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = dc.Ping(ctx, client.PingOptions{})
		cancel()
	}
	if err != nil {
		testenv.RequireOrSkip(t, "docker not reachable: %v", err)
	}
	t.Cleanup(func() { _ = dc.Close() })

	reg := registry.Start(t)
	t.Cleanup(func() { remove(dc, reg.DockerImageFilter(), true) })
	s := &Shim{Instance: instance, Dir: filepath.Dir(socket), Socket: socket}
	t.Cleanup(func() { remove(dc, LabelInstance+"="+s.Instance, false) })
	bins := testenv.Build(t, nil, "github.com/microlet/microlet/services/runtime-shim", "github.com/microlet/microlet/services/runtime-shim/pause")
	full := append([]string{"--socket=" + s.Socket, "--run-dir=" + s.Dir, "--data-dir=" + filepath.Join(s.Dir, "data"),
		"--docker-instance=" + s.Instance}, args...)
	testenv.StartProcess(t, "runtime-shim", filepath.Join(bins, "runtime-shim"), full...)

	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	cc, err := grpcclient.Dial("unix://" + s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := grpcclient.WaitServing(ctx, cc, ""); err != nil {
		t.Fatalf("runtime-shim not serving: %v", err)
	}
	if s.Runtime, err = remote.NewRemoteRuntimeService(ctx, "unix://"+s.Socket, patience, nil, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Runtime.Close(context.Background()) })
	if s.Images, err = remote.NewRemoteImageService(ctx, "unix://"+s.Socket, patience, nil, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Images.Close(context.Background()) })
	s.Busybox = reg.Image(registry.Busybox)
	if _, err := s.Images.PullImage(ctx, &runtimeapi.ImageSpec{Image: s.Busybox}, nil, nil); err != nil {
		t.Fatalf("pull %s: %v", s.Busybox, err)
	}
	return s
}

// remove deletes the containers (or images) with the label.
func remove(dc *client.Client, label string, images bool) {
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	f := client.Filters{}
	f.Add("label", label)
	if images {
		res, err := dc.ImageList(ctx, client.ImageListOptions{All: true, Filters: f})
		if err != nil {
			return
		}
		for _, im := range res.Items {
			_, _ = dc.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		}
		return
	}
	res, err := dc.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return
	}
	for _, c := range res.Items {
		_, _ = dc.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
}
