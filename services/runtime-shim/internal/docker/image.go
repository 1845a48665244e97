package docker

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/moby/moby/api/pkg/authconfig"
	"github.com/moby/moby/api/types/registry"
	"github.com/moby/moby/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage pulls through Docker with the caller's registry credentials and
// answers the pulled image's ID.
func (b *Backend) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, invalid("image.image", "is required")
	}
	opts := client.ImagePullOptions{}
	if a := req.GetAuth(); a != nil {
		enc, err := authconfig.Encode(registry.AuthConfig{
			Username: a.Username, Password: a.Password, Auth: a.Auth,
			ServerAddress: a.ServerAddress, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken,
		})
		if err != nil {
			return nil, invalid("auth", err.Error())
		}
		opts.RegistryAuth = enc
	}
	src, tagAs, err := b.mirrored(ref)
	if err != nil {
		return nil, invalid("image.image", err.Error())
	}
	resp, err := b.cli.ImagePull(ctx, src, opts)
	if err != nil {
		return nil, toStatus(err, "pull %s", src)
	}
	err = resp.Wait(ctx)
	_ = resp.Close()
	if err != nil {
		return nil, toStatus(err, "pull %s", src)
	}
	if tagAs != "" {
		// Name the image as the caller asked for it, then drop the
		// mirror's name so the image lists only the requested tag.
		if _, err := b.cli.ImageTag(ctx, client.ImageTagOptions{Source: src, Target: tagAs}); err != nil {
			return nil, toStatus(err, "tag %s as %s", src, tagAs)
		}
		if _, err := b.cli.ImageRemove(ctx, src, client.ImageRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			b.log.Warn("untag mirror name", "image", src, "err", err)
		}
		ref = tagAs
	}
	ins, err := b.cli.ImageInspect(ctx, ref)
	if err != nil {
		return nil, toStatus(err, "inspect pulled %s", ref)
	}
	return &runtimeapi.PullImageResponse{ImageRef: ins.ID}, nil
}

// mirrored returns what to pull for ref: ref itself, or the same path on the
// configured mirror of ref's registry, with the name to tag the result as
// (empty for digest references, which cannot be tagged).
func (b *Backend) mirrored(ref string) (src, tagAs string, err error) {
	if len(b.opts.Mirrors) == 0 {
		return ref, "", nil
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", err
	}
	mirror, ok := b.opts.Mirrors[reference.Domain(named)]
	if !ok {
		return ref, "", nil
	}
	src = mirror + "/" + reference.Path(named)
	if d, ok := named.(reference.Digested); ok {
		return src + "@" + d.Digest().String(), "", nil
	}
	tagged := reference.TagNameOnly(named)
	return src + ":" + tagged.(reference.Tagged).Tag(), tagged.String(), nil
}

// isPauseImage reports whether one of tags names the sandbox image. That
// image is pinned (CRI Image.pinned), so the kubelet's image GC never
// removes it, as containerd and CRI-O pin theirs.
func (b *Backend) isPauseImage(tags []string) bool {
	want := normalizeRef(b.opts.PauseImage)
	for _, t := range tags {
		if normalizeRef(t) == want {
			return true
		}
	}
	return false
}

// normalizeRef is ref in its full form (docker.io/library/x:latest); a ref
// that does not parse is returned as it is.
func normalizeRef(ref string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ref
	}
	return reference.TagNameOnly(named).String()
}

func toCRIImage(id string, tags, digests []string, size int64, user string) *runtimeapi.Image {
	img := &runtimeapi.Image{Id: id, RepoTags: tags, RepoDigests: digests, Size: uint64(max(size, 0)), Spec: &runtimeapi.ImageSpec{Image: id}}
	if user != "" {
		u, _, _ := strings.Cut(user, ":")
		if n, err := strconv.ParseInt(u, 10, 64); err == nil {
			img.Uid = &runtimeapi.Int64Value{Value: n}
		} else {
			img.Username = u
		}
	}
	return img
}

// ImageStatus answers an empty response (not an error) for an absent image,
// as the CRI asks.
func (b *Backend) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, invalid("image.image", "is required")
	}
	ins, err := b.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) || cerrdefs.IsInvalidArgument(err) {
			return &runtimeapi.ImageStatusResponse{}, nil
		}
		return nil, toStatus(err, "inspect image %s", ref)
	}
	user := ""
	if ins.Config != nil {
		user = ins.Config.User
	}
	resp := &runtimeapi.ImageStatusResponse{Image: toCRIImage(ins.ID, ins.RepoTags, ins.RepoDigests, ins.Size, user)}
	resp.Image.Pinned = b.isPauseImage(ins.RepoTags)
	if req.Verbose {
		resp.Info = map[string]string{"info": `{"os":"` + ins.Os + `","architecture":"` + ins.Architecture + `"}`}
	}
	return resp, nil
}

// ListImages lists Docker's images, optionally only those matching the filter's image.
func (b *Backend) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	opts := client.ImageListOptions{}
	if ref := req.GetFilter().GetImage().GetImage(); ref != "" {
		opts.Filters = client.Filters{}
		opts.Filters.Add("reference", ref)
	}
	res, err := b.cli.ImageList(ctx, opts)
	if err != nil {
		return nil, toStatus(err, "list images")
	}
	out := make([]*runtimeapi.Image, 0, len(res.Items))
	for _, s := range res.Items {
		im := toCRIImage(s.ID, s.RepoTags, s.RepoDigests, s.Size, "")
		im.Pinned = b.isPauseImage(s.RepoTags)
		out = append(out, im)
	}
	return &runtimeapi.ListImagesResponse{Images: out}, nil
}

// RemoveImage removes the image with all its tags; an absent image is not
// an error. It returns only once Docker no longer has the image: calls are
// serialised, and Docker is asked again after the removal, so concurrent
// removals of one image all see it gone when they return (critest's image
// consistency spec).
func (b *Backend) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	ref := req.GetImage().GetImage()
	if ref == "" {
		return nil, invalid("image.image", "is required")
	}
	b.remove.Lock()
	defer b.remove.Unlock()
	ins, err := b.cli.ImageInspect(ctx, ref)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return &runtimeapi.RemoveImageResponse{}, nil
		}
		return nil, toStatus(err, "inspect image %s", ref)
	}
	// Removing by ID with force drops every tag, the CRI's meaning of
	// removing an image.
	_, rmErr := b.cli.ImageRemove(ctx, ins.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	if rmErr != nil && cerrdefs.IsNotFound(rmErr) {
		rmErr = nil
	}
	// Bounded: an image someone pulls again right away stays present.
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// Whatever Docker answered (it says "unrecognized image ID" when
	// another client's removal won the race), the image is removed when
	// Docker no longer finds it.
	for {
		_, ierr := b.cli.ImageInspect(wait, ins.ID)
		switch {
		case cerrdefs.IsNotFound(ierr):
			return &runtimeapi.RemoveImageResponse{}, nil
		case rmErr != nil:
			return nil, toStatus(rmErr, "remove image %s", ref)
		case ierr != nil:
			return nil, toStatus(ierr, "inspect image %s after removing it", ref)
		}
		// Docker said it removed the image but still shows it.
		select {
		case <-wait.Done():
			return nil, toStatus(wait.Err(), "remove image %s: Docker still shows it", ref)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ImageFsInfo reports the filesystem of Docker's root dir.
func (b *Backend) ImageFsInfo(ctx context.Context, _ *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	info, err := b.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return nil, toStatus(err, "docker info")
	}
	root := info.Info.DockerRootDir
	usage := &runtimeapi.FilesystemUsage{Timestamp: nowNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: root}}
	var st syscall.Statfs_t
	if err := syscall.Statfs(root, &st); err == nil {
		usage.UsedBytes = &runtimeapi.UInt64Value{Value: (st.Blocks - st.Bfree) * uint64(st.Bsize)}
		usage.InodesUsed = &runtimeapi.UInt64Value{Value: st.Files - st.Ffree}
	} else {
		usage.UsedBytes = &runtimeapi.UInt64Value{}
		usage.InodesUsed = &runtimeapi.UInt64Value{}
	}
	return &runtimeapi.ImageFsInfoResponse{ImageFilesystems: []*runtimeapi.FilesystemUsage{usage}, ContainerFilesystems: []*runtimeapi.FilesystemUsage{usage}}, nil
}
