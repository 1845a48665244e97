package conformance

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/microlet/microlet/internal/testenv/registry"
)

// MirrorImages are the images the suite pulls with pullPolicy Always (the
// image volume spec's kitten), which no prepared local image can satisfy:
// StartMirror serves them from a local registry that runtime-shim uses as
// registry.k8s.io's mirror (--registry-mirrors).
var MirrorImages = []string{KittenImage}

// upstreamRegistry is the registry the mirror stands in for.
const upstreamRegistry = "registry.k8s.io"

// StartMirror starts a registry on 127.0.0.1 holding MirrorImages, built
// from src as PrepareImages builds them. Its Host is the mirror to give
// runtime-shim as "registry.k8s.io=<host>"; Close stops it.
func StartMirror(ctx context.Context, src ImageSources) (*registry.Registry, error) {
	imgs, err := MirrorOCIImages(src)
	if err != nil {
		return nil, err
	}
	reg, err := registry.New(ctx)
	if err != nil {
		return nil, err
	}
	for repoTag, img := range imgs {
		if err := reg.Push(ctx, repoTag, img); err != nil {
			_ = reg.Close()
			return nil, err
		}
	}
	return reg, nil
}

// MirrorOCIImages builds MirrorImages from src, keyed by their
// repository:tag under registry.k8s.io (e2e-test-images/kitten:1.8), for a
// registry that stands in for registry.k8s.io.
func MirrorOCIImages(src ImageSources) (map[string]v1.Image, error) {
	trees, err := imageTrees(src)
	if err != nil {
		return nil, err
	}
	out := map[string]v1.Image{}
	for _, want := range MirrorImages {
		var found *namedTree
		for i := range trees {
			for _, n := range trees[i].names {
				if n == want {
					found = &trees[i]
				}
			}
		}
		if found == nil {
			return nil, fmt.Errorf("mirror: no image %s", want)
		}
		img, err := found.tree.ociImage()
		if err != nil {
			return nil, fmt.Errorf("mirror: %s: %w", want, err)
		}
		out[strings.TrimPrefix(want, upstreamRegistry+"/")] = img
	}
	return out, nil
}

// MirrorFlag is runtime-shim's --registry-mirrors value for reg.
func MirrorFlag(reg *registry.Registry) string {
	return "--registry-mirrors=" + upstreamRegistry + "=" + reg.Host()
}

// ociImage is the tree as a one-layer image whose configuration follows
// the tree's docker import changes (ENV, ENTRYPOINT, CMD, USER, EXPOSE).
func (t *tree) ociImage() (v1.Image, error) {
	var buf bytes.Buffer
	if err := t.writeTar(&buf); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	for _, c := range t.changes {
		verb, arg, _ := strings.Cut(c, " ")
		switch verb {
		case "ENV":
			cf.Config.Env = append(cf.Config.Env, arg)
		case "ENTRYPOINT":
			cf.Config.Entrypoint = jsonList(arg)
		case "CMD":
			cf.Config.Cmd = jsonList(arg)
		case "USER":
			cf.Config.User = arg
		case "EXPOSE":
			if cf.Config.ExposedPorts == nil {
				cf.Config.ExposedPorts = map[string]struct{}{}
			}
			cf.Config.ExposedPorts[arg+"/tcp"] = struct{}{}
		default:
			return nil, fmt.Errorf("image change %q not supported for a registry image", c)
		}
	}
	return mutate.ConfigFile(img, cf)
}

// jsonList parses the ["a", "b"] form the trees' changes use.
func jsonList(s string) []string {
	s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "["), "]")
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.Trim(strings.TrimSpace(f), `"`); f != "" {
			out = append(out, f)
		}
	}
	return out
}
