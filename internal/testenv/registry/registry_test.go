package registry

import (
	"context"
	"io"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestRegistryServesImages(t *testing.T) {
	r := Start(t)
	if err := r.MirrorCritest(context.Background()); err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for _, ref := range []string{Busybox, WebServer, "k8s-staging-cri-tools/test-image-1:latest", "k8s-staging-cri-tools/test-image-2:latest",
		"k8s-staging-cri-tools/test-image-tags:1", "k8s-staging-cri-tools/test-image-tags:2"} {
		nr, err := name.ParseReference(r.Image(ref), name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(nr)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		cf, err := img.ConfigFile()
		if err != nil || cf.OS != "linux" || cf.Config.Labels[LabelRegistry] != r.Host() {
			t.Fatalf("%s config: %+v %v", ref, cf, err)
		}
		d, _ := img.Digest()
		digests[ref] = d.String()
		ls, _ := img.Layers()
		rc, err := ls[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, rc)
		_ = rc.Close()
		if n < 1<<20 {
			t.Fatalf("%s: layer of %d bytes lacks busybox", ref, n)
		}
	}
	if digests["k8s-staging-cri-tools/test-image-1:latest"] == digests["k8s-staging-cri-tools/test-image-2:latest"] {
		t.Error("test-image-1 and -2 must differ")
	}
	if digests["k8s-staging-cri-tools/test-image-tags:1"] != digests["k8s-staging-cri-tools/test-image-tags:2"] {
		t.Error("test-image-tags:1 and :2 must be the same image")
	}
}
