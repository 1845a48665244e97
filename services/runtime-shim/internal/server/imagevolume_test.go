package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestImageVolume mounts an image into containers the way the kubelet asks
// for an image volume (a CRI mount with image set and no host path): the
// image's files are there, read-only; an image_sub_path mounts a directory
// of it; two containers share one extraction under the shim's data dir;
// the status reports the image mounts; a sub path leaving the image is
// InvalidArgument and an image that is not
// present NotFound, both naming the mount.
func TestImageVolume(t *testing.T) {
	ctx, sh, image := busyboxShim(t, 5*time.Minute)
	rt := sh.Runtime
	pc := podConfig("image-volume", t.TempDir())
	sbID := runSandbox(ctx, t, rt, pc)
	create := func(name string, mounts ...*runtimeapi.Mount) (*runtimeapi.CreateContainerResponse, error) {
		return rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sbID, SandboxConfig: pc,
			Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: name}, Image: &runtimeapi.ImageSpec{Image: image},
				Command: []string{"sleep", "3600"}, LogPath: name + ".log", Mounts: mounts}})
	}
	sh1 := func(id, script string) (string, int32) {
		t.Helper()
		ex := get(rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", script}, Timeout: 30})).must(t)
		return string(ex.Stdout) + string(ex.Stderr), ex.ExitCode
	}
	volume := func(path, sub string) *runtimeapi.Mount {
		// The kubelet asks for read-only; the shim makes it so regardless.
		return &runtimeapi.Mount{ContainerPath: path, Image: &runtimeapi.ImageSpec{Image: image}, ImageSubPath: sub}
	}

	var ids []string
	for _, name := range []string{"a", "b"} {
		c := get(create(name, volume("/vol", ""), volume("/sub", "bin"))).must(t)
		get(rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId})).must(t)
		ids = append(ids, c.ContainerId)
	}
	for _, id := range ids {
		if out, code := sh1(id, "test -f /vol/bin/busybox && test -f /sub/busybox && echo present"); code != 0 || out != "present\n" {
			t.Errorf("container %s: image files: %q exit %d", id, out, code)
		}
		if out, code := sh1(id, "touch /vol/new 2>&1; echo rc=$?"); !strings.Contains(out, "Read-only file system") || !strings.HasSuffix(out, "rc=1\n") || code != 0 {
			t.Errorf("container %s: writing into the image volume: %q", id, out)
		}
	}
	// The status reports the image mounts as asked (containerd does the
	// same), which is how the kubelet's image GC sees the images in use.
	st := get(rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ids[0]})).must(t)
	got := map[string]string{}
	for _, m := range st.Status.Mounts {
		if m.GetImage().GetImage() != "" {
			got[m.ContainerPath] = m.Image.Image + "|" + m.ImageSubPath + "|" + m.HostPath
			if !m.Readonly {
				t.Errorf("image mount %s reported writable", m.ContainerPath)
			}
		}
	}
	if want := map[string]string{"/vol": image + "||", "/sub": image + "|bin|"}; len(got) != 2 || got["/vol"] != want["/vol"] || got["/sub"] != want["/sub"] {
		t.Errorf("status image mounts %v, want %v", got, want)
	}
	entries, err := os.ReadDir(filepath.Join(sh.DataDir, "runtime-shim", "image-volumes"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	if len(dirs) != 1 {
		t.Errorf("image-volumes holds %q, want one extraction shared by both containers", dirs)
	}

	_, err = create("bad-sub", volume("/vol", "../etc"))
	wantCode(t, err, codes.InvalidArgument, "a sub path leaving the image")
	if err != nil && !strings.Contains(err.Error(), "config.mounts[0].image_sub_path") {
		t.Errorf("error %q does not name the mount", err)
	}
	_, err = create("missing", &runtimeapi.Mount{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: "microlet.test/absent:1"}})
	wantCode(t, err, codes.NotFound, "an absent image")
	if err != nil && !strings.Contains(err.Error(), "config.mounts[0].image") {
		t.Errorf("error %q does not name the mount", err)
	}
}
