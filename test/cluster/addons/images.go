package addons

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/microlet/microlet/test/cluster/dockerimage"
)

// Image names, upstream's where the add-on has one. kubeadm v1.36.3
// deploys CoreDNS v1.14.2 under the same repository; the add-on runs
// v1.15.0 under its own tag.
const (
	KubeProxyImage     = "registry.k8s.io/kube-proxy:v1.36.3"
	CoreDNSImage       = "registry.k8s.io/coredns/coredns:v1.15.0"
	MetricsServerImage = "registry.k8s.io/metrics-server/metrics-server:v0.8.0"
	// PodnetRepository is podnet's image repository; its tag is the hash of
	// podnet's sources (PodnetImage).
	PodnetRepository = "microlet.local/podnet"
)

// LabelContent is set on every add-on image to the hash of its file system
// and configuration; an image whose label matches is not imported again.
const LabelContent = dockerimage.LabelContent

// podnetSources are podnet's sources; their hash is the image tag, so a
// change to podnet yields a new tag that Render and EnsureImages agree on
// without building anything.
//
//go:embed podnet/*.go podnet/cmd/podnet/*.go
var podnetSources embed.FS

// PodnetImage is podnet's image name, microlet.local/podnet:<hash of its
// sources>.
func PodnetImage() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(podnetSources, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := podnetSources.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash podnet sources: %w", err)
	}
	return PodnetRepository + ":" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// EnsureImages builds (cached by version or content) and imports into the
// host's Docker every add-on image; it returns the image names, which the
// cluster harness loads into each node. Builds go through hack/build-*.sh
// under repoRoot; progress goes to log.
func EnsureImages(ctx context.Context, repoRoot string, log io.Writer) ([]string, error) {
	run := func(script string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", script))
		cmd.Dir = repoRoot
		cmd.Stderr = log
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("hack/%s: %w", script, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	built := map[string]string{}
	for _, s := range []string{"build-iptables-base.sh", "build-kube-proxy.sh", "build-coredns.sh", "build-metrics-server.sh"} {
		p, err := run(s)
		if err != nil {
			return nil, err
		}
		built[s] = p
	}
	podnetImage, err := PodnetImage()
	if err != nil {
		return nil, err
	}
	podnetBin, err := buildPodnet(ctx, repoRoot, log)
	if err != nil {
		return nil, err
	}
	iptablesBase := built["build-iptables-base.sh"]
	specs := []dockerimage.Spec{
		{
			Name: KubeProxyImage, Base: iptablesBase,
			Files:   map[string]string{"usr/local/bin/kube-proxy": built["build-kube-proxy.sh"]},
			Changes: []string{dockerimage.EnvPath, `ENTRYPOINT ["/usr/local/bin/kube-proxy"]`},
		},
		{
			Name:    CoreDNSImage,
			Files:   map[string]string{"coredns": built["build-coredns.sh"]},
			Changes: []string{`ENTRYPOINT ["/coredns"]`, "EXPOSE 53 53/udp"},
		},
		{
			Name:    MetricsServerImage,
			Files:   map[string]string{"metrics-server": built["build-metrics-server.sh"]},
			Changes: []string{`ENTRYPOINT ["/metrics-server"]`, "USER 65534:65534"},
		},
		{
			Name: podnetImage, Base: iptablesBase,
			Files:   map[string]string{"podnet": podnetBin},
			Changes: []string{dockerimage.EnvPath, `ENTRYPOINT ["/podnet"]`},
		},
	}
	var names []string
	for _, s := range specs {
		if _, err := dockerimage.Import(ctx, s, log); err != nil {
			return nil, err
		}
		names = append(names, s.Name)
	}
	return names, nil
}

// buildPodnet builds the static podnet binary into a temporary directory
// of the cache (the Go build cache makes repeats cheap).
func buildPodnet(ctx context.Context, repoRoot string, log io.Writer) (string, error) {
	cacheDir := os.Getenv("MICROLET_CACHE_DIR")
	if cacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		cacheDir = filepath.Join(base, "microlet")
	}
	dir := filepath.Join(cacheDir, "podnet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, fmt.Sprintf("podnet.%d", os.Getpid()))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./test/cluster/addons/podnet/cmd/podnet")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build podnet: %w", err)
	}
	final := filepath.Join(dir, "podnet")
	if err := os.Rename(bin, final); err != nil {
		return "", err
	}
	return final, nil
}
