package registry

import (
	"context"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
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
			if ci.variant != 0 {
				c.Labels = map[string]string{LabelRegistry: r.host, "io.microlet.variant": strconv.Itoa(ci.variant)}
			}
			switch ci.variant {
			case 6:
				c.Cmd = []string{"/usr/sbin/nginx", "-g", "master process"}
				c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
			case 7:
				c.Cmd = WebServerCmd
				c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
			}
		})
		if err != nil {
			return err
		}
		// critest drops the tag when it rewrites a name onto
		// -registry-prefix, so every repository is also pushed as latest.
		repo, _, _ := strings.Cut(ci.repoTag, ":")
		for _, rt := range []string{ci.repoTag, repo + ":latest"} {
			if err := r.Push(ctx, rt, img); err != nil {
				return err
			}
		}
	}
	return nil
}
