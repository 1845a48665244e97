package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRecursiveReadOnly checks what the shim says and does about recursive
// read-only mounts on this host's Docker: Status lists the default handler
// first with the feature as the daemon offers it; where it is not offered a
// recursive read-only mount is refused with InvalidArgument naming the
// mount, and a plain read-only mount stays read-only at its top only (a
// mount below it remains writable), as the CRI defines it.
func TestRecursiveReadOnly(t *testing.T) {
	ctx, sh, image := busyboxShim(t, 5*time.Minute)
	rt := sh.Runtime
	st := get(rt.Status(ctx, &runtimeapi.StatusRequest{})).must(t)
	if len(st.RuntimeHandlers) == 0 || st.RuntimeHandlers[0].Name != "" || st.RuntimeHandlers[0].Features == nil {
		t.Fatalf("runtime handlers = %v, want the default handler first, with its features", st.RuntimeHandlers)
	}
	for _, h := range st.RuntimeHandlers {
		if h.GetFeatures().GetUserNamespaces() {
			t.Errorf("user namespaces advertised for handler %q; Docker has none per pod", h.Name)
		}
	}
	rro := st.RuntimeHandlers[0].Features.RecursiveReadOnlyMounts
	t.Logf("recursive read-only mounts supported: %v", rro)

	// A volume with a tmpfs mounted inside it.
	vol := t.TempDir()
	sub := filepath.Join(vol, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a tmpfs below the volume: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })

	pc := podConfig("rro", t.TempDir())
	sb := runSandbox(ctx, t, rt, pc)
	create := func(name string, m *runtimeapi.Mount) (*runtimeapi.CreateContainerResponse, error) {
		return rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb, SandboxConfig: pc, Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: []string{"sleep", "3600"}, Mounts: []*runtimeapi.Mount{m},
		}})
	}

	t.Run("recursive read-only without readonly is refused", func(t *testing.T) {
		_, err := create("bad", &runtimeapi.Mount{ContainerPath: "/vol", HostPath: vol, RecursiveReadOnly: true})
		wantCode(t, err, codes.InvalidArgument, "recursive_read_only without readonly")
		if !strings.Contains(err.Error(), "config.mounts[0].recursive_read_only") {
			t.Errorf("error %q does not name the mount's field", err)
		}
	})

	t.Run("recursive read-only mount", func(t *testing.T) {
		c, err := create("rro", &runtimeapi.Mount{ContainerPath: "/vol", HostPath: vol, Readonly: true, RecursiveReadOnly: true})
		if !rro {
			wantCode(t, err, codes.InvalidArgument, "recursive read-only mount on a runtime without them")
			if !strings.Contains(err.Error(), "recursive read-only mounts are not supported") {
				t.Errorf("error %q does not say why", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)
		ex := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"touch", "/vol/sub/f"}, Timeout: 30})).must(t)
		if ex.ExitCode == 0 {
			t.Error("wrote below a recursively read-only mount")
		}
	})

	t.Run("read-only mount is read-only at its top only", func(t *testing.T) {
		c := get(create("ro", &runtimeapi.Mount{ContainerPath: "/vol", HostPath: vol, Readonly: true})).must(t)
		get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)
		top := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"touch", "/vol/f"}, Timeout: 30})).must(t)
		if top.ExitCode == 0 {
			t.Error("wrote to the read-only mount")
		}
		below := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: c.ContainerId, Cmd: []string{"touch", "/vol/sub/f"}, Timeout: 30})).must(t)
		if below.ExitCode != 0 {
			t.Errorf("write below the read-only mount failed (%d): %s", below.ExitCode, below.Stderr)
		}
	})
}
