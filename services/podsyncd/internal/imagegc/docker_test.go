package imagegc_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/shim"
	"github.com/microlet/microlet/services/podsyncd/internal/imagegc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

const (
	// repo prefixes every image this test makes; leftovers of an earlier,
	// interrupted run carry it too and are collected like the others.
	repo = "microlet-imagegc-test/"
	// testLabel marks them for the cleanup.
	testLabel = "io.microlet.test=imagegc"
	// pauseImage is runtime-shim's default sandbox image.
	pauseImage = "microlet.local/pause:1.0"
)

// scopedImages is the real CRI image service with a narrower ListImages:
// Docker is shared by every test on this machine, so the collector must
// only see this test's images and the sandbox image. Removal and
// everything else go to runtime-shim unchanged.
type scopedImages struct {
	criapi.ImageManagerService
}

func (s scopedImages) ListImages(ctx context.Context, filter *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	all, err := s.ImageManagerService.ListImages(ctx, filter)
	if err != nil {
		return nil, err
	}
	var out []*runtimeapi.Image
	for _, im := range all {
		if slices.ContainsFunc(im.RepoTags, func(t string) bool { return strings.HasPrefix(t, repo) || t == pauseImage }) {
			out = append(out, im)
		}
	}
	return out, nil
}

// importImage makes an image of one 64 KiB file whose bytes depend on
// seed: distinct IDs, equal sizes. It is tagged with every tag given.
func importImage(t *testing.T, dc *client.Client, seed string, tags ...string) string {
	t.Helper()
	ctx := context.Background()
	data := bytes.Repeat([]byte(seed+"\n"), 64<<10/(len(seed)+1))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "data", Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := dc.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, tags[0], client.ImageImportOptions{
		Changes: []string{`CMD ["/data"]`, `LABEL ` + testLabel},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(res)
	_ = res.Close()
	if bytes.Contains(out, []byte("errorDetail")) {
		t.Fatalf("import %s: %s", tags[0], out)
	}
	for _, tag := range tags[1:] {
		if _, err := dc.ImageTag(ctx, client.ImageTagOptions{Source: tags[0], Target: tag}); err != nil {
			t.Fatal(err)
		}
	}
	ins, err := dc.ImageInspect(ctx, tags[0])
	if err != nil {
		t.Fatal(err)
	}
	return ins.ID
}

func removeTestImages(dc *client.Client) {
	ctx := context.Background()
	f := client.Filters{}
	f.Add("label", testLabel)
	res, err := dc.ImageList(ctx, client.ImageListOptions{All: true, Filters: f})
	if err != nil {
		return
	}
	for _, im := range res.Items {
		_, _ = dc.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
}

// TestImageGCOnDocker runs the collector against runtime-shim on the real
// Docker Engine and the real image filesystem, with thresholds of 1% and
// 0% so any usage is over them: every image that may go, goes (and the
// collector reports it could not reach 0%). Many images of equal size and
// an earlier run's leftovers (one with two tags) are collected; the image a
// container uses (created, never started), the image another container
// mounts as an image volume, the pinned pause image and an image first
// seen less than MinAge ago are not.
func TestImageGCOnDocker(t *testing.T) {
	s := shim.Start(t, "imagegc")
	dc, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	removeTestImages(dc) // an interrupted earlier run's, so the test starts from what it makes
	t.Cleanup(func() { removeTestImages(dc) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cc, err := grpcclient.Dial("unix://" + s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rt, img := runtimeapi.NewRuntimeServiceClient(cc), runtimeapi.NewImageServiceClient(cc)

	ids := map[string]string{} // first tag -> image ID
	for i := range 6 {
		tag := fmt.Sprintf("%simg-%d:v1", repo, i)
		ids[tag] = importImage(t, dc, tag, tag)
	}
	// Leftovers of another run, one with a second tag.
	ids[repo+"leftover-a:old"] = importImage(t, dc, "leftover-a", repo+"leftover-a:old", repo+"leftover-a:also")
	ids[repo+"leftover-b:old"] = importImage(t, dc, "leftover-b", repo+"leftover-b:old")

	// img-0 is in use by a container that was created but never started.
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "imagegc", Namespace: "default", Uid: "imagegc-uid"},
		LogDirectory: t.TempDir(), Linux: &runtimeapi.LinuxPodSandboxConfig{},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "user"}, Image: &runtimeapi.ImageSpec{Image: ids[repo+"img-0:v1"]}, LogPath: "user.log",
	}}); err != nil {
		t.Fatal(err)
	}

	// img-6 is the image volume of a container (created; runtime-shim
	// reports its image mounts in its status).
	ids[repo+"img-6:v1"] = importImage(t, dc, repo+"img-6:v1", repo+"img-6:v1")
	_, err = rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "mounter"}, Image: &runtimeapi.ImageSpec{Image: ids[repo+"img-0:v1"]}, LogPath: "mounter.log",
		Mounts: []*runtimeapi.Mount{{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: ids[repo+"img-6:v1"]}, Readonly: true}},
	}})
	if err != nil {
		t.Fatal(err)
	}

	// The pause image is pinned.
	all, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pinned := false
	for _, im := range all.Images {
		if slices.Contains(im.RepoTags, pauseImage) {
			pinned = im.Pinned
		} else if im.Pinned {
			t.Errorf("image %v pinned; only the pause image is", im.RepoTags)
		}
	}
	if !pinned {
		t.Errorf("the pause image %s is not pinned", pauseImage)
	}

	clk := testclock.NewFakeClock(time.Now())
	gc := imagegc.New(s.Runtime, scopedImages{s.Images}, imagegc.Policy{HighThresholdPercent: 1, LowThresholdPercent: 0, MinAge: 2 * time.Minute},
		imagegc.Options{Clock: clk, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	res, err := gc.GarbageCollect(ctx)
	if len(res.Removed) != 0 {
		t.Fatalf("first pass removed %v; every image is younger than MinAge", res.Removed)
	}
	if err == nil || !strings.Contains(err.Error(), "Insufficient free disk space") || res.UsagePercent < 1 {
		t.Fatalf("first pass: usage %d%%, err %v; want the insufficient space error at a real usage", res.UsagePercent, err)
	}
	late := repo + "late:v1"
	ids[late] = importImage(t, dc, "late", late)
	clk.Step(2 * time.Minute)
	res, _ = gc.GarbageCollect(ctx)

	var want []string
	for _, tag := range []string{"img-1:v1", "img-2:v1", "img-3:v1", "img-4:v1", "img-5:v1", "leftover-a:old", "leftover-b:old"} {
		want = append(want, ids[repo+tag])
	}
	slices.Sort(want) // equal last use and detection: by ID
	if !slices.Equal(res.Removed, want) {
		t.Errorf("removed %v, want %v", res.Removed, want)
	}
	exists := func(ref string) bool {
		_, err := dc.ImageInspect(ctx, ref)
		if err != nil && !cerrdefs.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	for tag := range ids {
		kept := tag == repo+"img-0:v1" || tag == repo+"img-6:v1" || tag == late
		if exists(tag) != kept {
			t.Errorf("%s exists: %v, want %v", tag, !kept, kept)
		}
	}
	if exists(repo + "leftover-a:also") {
		t.Error("the second tag of a removed image is still there")
	}
	if !exists(pauseImage) {
		t.Error("the pause image was removed")
	}
}
