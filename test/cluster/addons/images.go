package addons

import (
	"archive/tar"
	"bytes"
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
	"sort"
	"strings"
	"time"
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
const LabelContent = "io.microlet.addons.content"

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

// envPath is every image's search path.
const envPath = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// imageSpec is one image: an optional base directory tree, files on top
// (path in the image -> file on the host) and docker import changes.
type imageSpec struct {
	name    string
	base    string
	files   map[string]string
	changes []string
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
	specs := []imageSpec{
		{
			name: KubeProxyImage, base: iptablesBase,
			files:   map[string]string{"usr/local/bin/kube-proxy": built["build-kube-proxy.sh"]},
			changes: []string{envPath, `ENTRYPOINT ["/usr/local/bin/kube-proxy"]`},
		},
		{
			name:    CoreDNSImage,
			files:   map[string]string{"coredns": built["build-coredns.sh"]},
			changes: []string{`ENTRYPOINT ["/coredns"]`, "EXPOSE 53 53/udp"},
		},
		{
			name:    MetricsServerImage,
			files:   map[string]string{"metrics-server": built["build-metrics-server.sh"]},
			changes: []string{`ENTRYPOINT ["/metrics-server"]`, "USER 65534:65534"},
		},
		{
			name: podnetImage, base: iptablesBase,
			files:   map[string]string{"podnet": podnetBin},
			changes: []string{envPath, `ENTRYPOINT ["/podnet"]`},
		},
	}
	var names []string
	for _, s := range specs {
		if err := importImage(ctx, s, log); err != nil {
			return nil, err
		}
		names = append(names, s.name)
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

// importImage docker-imports s unless an image of that name already has
// its content label.
func importImage(ctx context.Context, s imageSpec, log io.Writer) error {
	var buf bytes.Buffer
	if err := writeTar(&buf, s); err != nil {
		return fmt.Errorf("image %s: %w", s.name, err)
	}
	h := sha256.New()
	h.Write(buf.Bytes())
	for _, c := range s.changes {
		fmt.Fprintf(h, "\x00%s", c)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	got, _ := exec.CommandContext(ctx, "docker", "image", "inspect", "-f", fmt.Sprintf("{{index .Config.Labels %q}}", LabelContent), s.name).Output()
	if strings.TrimSpace(string(got)) == sum {
		fmt.Fprintf(log, "image %s: up to date\n", s.name)
		return nil
	}
	args := []string{"import"}
	for _, c := range append(s.changes, "LABEL "+LabelContent+"="+sum) {
		args = append(args, "--change", c)
	}
	args = append(args, "-", s.name)
	size := buf.Len()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import %s: %w: %s", s.name, err, bytes.TrimSpace(out))
	}
	fmt.Fprintf(log, "image %s: imported (content %s, %d MiB)\n", s.name, sum, size>>20)
	return nil
}

// writeTar writes s's file system: the base tree then the files, owned by
// root, with fixed times, in a stable order, so equal content hashes
// equally.
func writeTar(w io.Writer, s imageSpec) error {
	tw := tar.NewWriter(w)
	var dirs = map[string]bool{}
	addDirs := func(p string) error {
		var parents []string
		for d := filepath.Dir(p); d != "." && d != "/" && !dirs[d]; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			dirs[parents[i]] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: parents[i] + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		return nil
	}
	if s.base != "" {
		err := filepath.WalkDir(s.base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(s.base, p)
			if rel == "." || rel == ".complete" {
				return nil
			}
			if _, over := s.files[rel]; over {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			hdr.Name = rel
			if d.IsDir() {
				hdr.Name += "/"
				dirs[rel] = true
			}
			normalize(hdr)
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if info.Mode().IsRegular() {
				return copyFile(tw, p)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("base %s: %w", s.base, err)
		}
	}
	paths := make([]string, 0, len(s.files))
	for p := range s.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := addDirs(p); err != nil {
			return err
		}
		info, err := os.Stat(s.files[p])
		if err != nil {
			return err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: info.Size()}
		normalize(hdr)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if err := copyFile(tw, s.files[p]); err != nil {
			return err
		}
	}
	// Directories every container expects to mount over.
	for _, d := range []string{"tmp", "etc", "proc", "sys", "dev", "run", "var"} {
		if dirs[d] {
			continue
		}
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	return tw.Close()
}

func normalize(h *tar.Header) {
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
	h.ModTime, h.AccessTime, h.ChangeTime = time0, time0, time0
	h.Format = tar.FormatPAX
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

var time0 = time.Unix(0, 0)
