package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// critestImages are the repositories critest pulls, without their
// registry host (registry.k8s.io, gcr.io): a runtime that mirrors those hosts
// to this registry finds them under the same paths. user is the user each
// image's config names.
var critestImages = []struct {
	repoTag string
	user    string
	variant int // images that must differ from each other get their own variant
}{
	{"k8s-staging-cri-tools/test-image-latest:latest", "", 0},
	{"k8s-staging-cri-tools/test-image-tag:test", "", 0},
	{"k8s-staging-cri-tools/test-image-tag:all", "", 0},
	{"k8s-staging-cri-tools/test-image-1:latest", "", 1},
	{"k8s-staging-cri-tools/test-image-2:latest", "", 2},
	{"k8s-staging-cri-tools/test-image-3:latest", "", 3},
	{"k8s-staging-cri-tools/test-image-tags:1", "", 4},
	{"k8s-staging-cri-tools/test-image-tags:2", "", 4},
	{"k8s-staging-cri-tools/test-image-tags:3", "", 4},
	{"k8s-staging-cri-tools/test-image-user-uid:latest", "1002", 0},
	{"k8s-staging-cri-tools/test-image-user-username:latest", "www-data", 0},
	{"k8s-staging-cri-tools/test-image-user-uid-group:latest", "1003:users", 0},
	{"k8s-staging-cri-tools/test-image-user-username-group:latest", "www-data:users", 0},
	{"k8s-staging-cri-tools/test-image-predefined-group:latest", "1000", 0},
	{"pause:3.9", "", 5},
	// The default images when no -test-images-file is given.
	{"e2e-test-images/busybox:1.29-2", "", 0},
	{"e2e-test-images/nginx:1.14-2", "", 6},
	{"e2e-test-images/httpd:2.4.39-4", "", 7},
	{"k8s-staging-cri-tools/hostnet-nginx-" + runtime.GOARCH + ":latest", "", 8},
	{"microlet/busybox:1.0", "", 0},
	{"microlet/httpd:1.0", "", 7},
}

// MirrorCritest pushes the images critest pulls under their upstream paths,
// for a runtime that mirrors upstream registries here. The digest-pinned
// image cannot be mirrored: its digest is that of upstream's own build.
// Each repository is also pushed as :latest, for critest's -registry-prefix
// mode, which drops tags when it rewrites names.
func (r *Registry) MirrorCritest(ctx context.Context) error {
	base, err := baseImage(r.host)
	if err != nil {
		return err
	}
	for _, ci := range critestImages {
		ci := ci
		img, err := withConfig(base, func(c *v1.Config) {
			c.Cmd = []string{"sh"}
			c.User = ci.user
			// Distinct configs make distinct images: Docker would otherwise
			// show one image carrying every tag, which critest's image
			// specs reject. Only the test-image-tags group shares one.
			id := ci.repoTag
			if ci.variant != 0 {
				id = "variant-" + strconv.Itoa(ci.variant)
			}
			c.Labels = map[string]string{LabelRegistry: r.host, "io.microlet.image": id}
			switch ci.variant {
			case 6:
				c.Cmd = []string{"/usr/sbin/nginx", "-g", "master process"}
				c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
			case 7:
				c.Cmd = WebServerCmd
				c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
			case 8:
				// critest's hostnet-nginx serves on host port 12003.
				c.Cmd = []string{"httpd", "-f", "-v", "-p", "12003", "-h", "/www"}
			}
		})
		if err != nil {
			return err
		}
		// critest drops the tag when it rewrites a name onto
		// -registry-prefix, so every repository is also pushed as latest.
		repo, _, _ := strings.Cut(ci.repoTag, ":")
		if err := r.pushBoth(ctx, ci.repoTag, repo, img); err != nil {
			return err
		}
	}
	nnp, err := nnpImage(ctx, base)
	if err != nil {
		return err
	}
	return r.pushBoth(ctx, "e2e-test-images/nonewprivs:1.3", "e2e-test-images/nonewprivs", nnp)
}

// pushBoth pushes img as repoTag and as repo:latest.
func (r *Registry) pushBoth(ctx context.Context, repoTag, repo string, img v1.Image) error {
	for _, rt := range []string{repoTag, repo + ":latest"} {
		if err := r.Push(ctx, rt, img); err != nil {
			return err
		}
	}
	return nil
}

// nnpImage is critest's nonewprivs image: our nnp program, setuid root,
// built with the Go toolchain (busybox drops setuid privileges itself, so
// it cannot stand in).
func nnpImage(ctx context.Context, base v1.Image) (v1.Image, error) {
	dir, err := os.MkdirTemp("", "nnp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(dir, "nnp")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./nnp")
	cmd.Dir = filepath.Dir(self)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("registry: build nnp: %v: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "usr/local/bin/nnp", Mode: 0o4755, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)})
	_, _ = tw.Write(data)
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		return nil, err
	}
	return withConfig(img, func(c *v1.Config) {
		c.Cmd = []string{"/usr/local/bin/nnp"}
		c.Labels = map[string]string{LabelRegistry: c.Labels[LabelRegistry], "io.microlet.image": "nonewprivs"}
	})
}
