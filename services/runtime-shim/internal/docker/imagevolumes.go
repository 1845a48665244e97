package docker

import (
	"context"
	"path/filepath"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/imagevolume"
)

// imageVolumeDir is where the backend keeps image mounts' extractions,
// under its data dir.
const imageVolumeDir = "image-volumes"

// imageVolumePath returns the host directory a container's image mount
// (mount i of its config, an image volume) binds read-only: the image's
// root filesystem extracted once per image ID (package imagevolume), or
// the mount's image_sub_path in it. The image must be present (the
// kubelet pulls it first); a missing one is NotFound. The sub path was
// checked with the rest of the config (validateContainerConfig).
func (b *Backend) imageVolumePath(ctx context.Context, i int, m *runtimeapi.Mount) (string, error) {
	b.imageVolumesOnce.Do(func() {
		b.imageVolumes, b.imageVolumesErr = imagevolume.New(b.cli, filepath.Join(b.opts.DataDir, imageVolumeDir), b.opts.Instance)
	})
	if b.imageVolumesErr != nil {
		return "", status.Errorf(codes.Internal, "config.mounts[%d]: %v", i, b.imageVolumesErr)
	}
	ref := m.GetImage().GetImage()
	if _, err := b.cli.ImageInspect(ctx, ref); err != nil {
		return "", status.Errorf(codes.NotFound, "config.mounts[%d].image: image %q is not present: %v", i, ref, err)
	}
	p, err := b.imageVolumes.Path(ctx, ref, m.GetImageSubPath())
	if err != nil {
		return "", status.Errorf(codes.Internal, "config.mounts[%d]: %v", i, err)
	}
	return p, nil
}
