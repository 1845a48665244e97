package cluster

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/microlet/microlet/test/cluster/addons"
	"github.com/microlet/microlet/test/cluster/dockerimage"
)

// NodeImage is the node image's name; dockerimage's content label says
// which build it holds.
const NodeImage = "microlet.local/node:dev"

// PauseImage is the sandbox image containerd runs (its own default for
// v2.4, and the one the e2e suite expects), made from microlet's pause
// program.
const PauseImage = "registry.k8s.io/pause:3.10.2"

// nodePackages are the Debian packages of the node's root filesystem
// (hack/build-debian-rootfs.sh adds their Depends closure): a shell and
// core tools for the entrypoint and `docker exec`, mount and util-linux
// for the mounts, iproute2, iptables (nf_tables) and conntrack for the pod
// network and kube-proxy's host-network pods, procps and kmod for people; mawk for the entrypoint.
var nodePackages = []string{"bash", "coreutils", "util-linux", "mount", "iproute2", "iptables", "conntrack",
	"procps", "kmod", "findutils", "grep", "sed", "mawk", "gzip", "tar", "hostname"}

//go:embed node/entrypoint.sh node/containerd.toml node/kubelet-config.yaml
var nodeFiles embed.FS

// microletBinaries are the programs of `make build` the node runs.
var microletBinaries = []string{"microlet", "microlet-services", "podconfig", "statusd", "nodestatusd", "cloudsyncd", "nodeapi", "podsyncd", "runtime-shim"}

// imageBuild is what the node image is made of, found or built by
// buildInputs.
type imageBuild struct {
	rootfs        string            // hack/build-debian-rootfs.sh
	containerdDir string            // containerd, containerd-shim-runc-v2, ctr
	runcDir       string            // runc
	cniDir        string            // the CNI plugins
	binDir        string            // make build's output
	tool          string            // this program, static
	images        map[string]string // image name -> docker save tar
}

// buildInputs runs the builds the node image needs (each cached by
// version or content) and saves the images every node starts with.
func buildInputs(ctx context.Context, c Config, log io.Writer) (*imageBuild, error) {
	b := &imageBuild{binDir: filepath.Join(c.RepoRoot, "bin"), images: map[string]string{}}
	var err error
	if b.rootfs, err = runScript(ctx, c.RepoRoot, log, "build-debian-rootfs.sh", append([]string{"cluster-node-rootfs"}, nodePackages...)...); err != nil {
		return nil, err
	}
	for _, s := range []struct {
		script string
		dst    *string
	}{{"build-containerd.sh", &b.containerdDir}, {"build-runc.sh", &b.runcDir}, {"build-cni-plugins.sh", &b.cniDir}} {
		if *s.dst, err = runScript(ctx, c.RepoRoot, log, s.script); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(log, "cluster: make build")
	mk := exec.CommandContext(ctx, "make", "build")
	mk.Dir, mk.Stdout, mk.Stderr = c.RepoRoot, log, log
	if err := mk.Run(); err != nil {
		return nil, fmt.Errorf("make build: %w", err)
	}
	b.tool = filepath.Join(c.stateDir(), "microlet-cluster")
	gb := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", b.tool, "./test/cluster/cmd/cluster")
	gb.Dir, gb.Stdout, gb.Stderr = c.RepoRoot, log, log
	gb.Env = append(os.Environ(), "CGO_ENABLED=0")
	if err := gb.Run(); err != nil {
		return nil, fmt.Errorf("go build ./test/cluster/cmd/cluster: %w", err)
	}
	if _, err := dockerimage.Import(ctx, dockerimage.Spec{
		Name:    PauseImage,
		Files:   map[string]string{"pause": filepath.Join(b.binDir, "pause")},
		Changes: []string{`ENTRYPOINT ["/pause"]`, "USER 65535:65535"},
	}, log); err != nil {
		return nil, err
	}
	names, err := addons.EnsureImages(ctx, c.RepoRoot, log)
	if err != nil {
		return nil, err
	}
	for _, n := range append([]string{PauseImage}, names...) {
		if b.images[n], err = savedImage(ctx, c.cacheDir(), n); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// savedImage is `docker save` of image, kept in dir under the image's ID
// so that it is saved once per content.
func savedImage(ctx context.Context, dir, image string) (string, error) {
	id, err := docker(ctx, "image", "inspect", "-f", "{{.Id}}", image)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "images", strings.TrimPrefix(id, "sha256:")[:20]+".tar")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", err
	}
	tmp := p + ".tmp"
	if _, err := docker(ctx, "save", "-o", tmp, image); err != nil {
		return "", err
	}
	return p, os.Rename(tmp, p)
}

// nodeSpec is the node image: the Debian root filesystem, the runtime,
// the CNI plugins, microlet and this program, the node's configuration
// and the saved images its entrypoint imports into containerd.
func nodeSpec(b *imageBuild, v addons.Values) (dockerimage.Spec, error) {
	files := map[string]string{
		"usr/local/bin/containerd":              filepath.Join(b.containerdDir, "containerd"),
		"usr/local/bin/containerd-shim-runc-v2": filepath.Join(b.containerdDir, "containerd-shim-runc-v2"),
		"usr/local/bin/ctr":                     filepath.Join(b.containerdDir, "ctr"),
		"usr/local/bin/runc":                    filepath.Join(b.runcDir, "runc"),
		"usr/local/bin/microlet-cluster":        b.tool,
	}
	for _, n := range microletBinaries {
		files["usr/local/bin/"+n] = filepath.Join(b.binDir, n)
	}
	entries, err := os.ReadDir(b.cniDir)
	if err != nil {
		return dockerimage.Spec{}, err
	}
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			files["opt/cni/bin/"+e.Name()] = filepath.Join(b.cniDir, e.Name())
		}
	}
	for _, p := range b.images {
		files["opt/microlet/images/"+filepath.Base(p)] = p
	}
	read := func(name string) []byte {
		data, _ := nodeFiles.ReadFile("node/" + name)
		return data
	}
	var kubeletConfig bytes.Buffer
	if err := template.Must(template.New("kubelet-config").Option("missingkey=error").Parse(string(read("kubelet-config.yaml")))).Execute(&kubeletConfig, v); err != nil {
		return dockerimage.Spec{}, err
	}
	data := map[string]dockerimage.File{
		"usr/local/bin/microlet-node-entrypoint": {Body: read("entrypoint.sh"), Mode: 0o755},
		"etc/containerd/config.toml":             {Body: read("containerd.toml")},
		"etc/kubernetes/kubelet-config.yaml":     {Body: kubeletConfig.Bytes()},
		// What maintainer scripts would have made: /bin/sh (dash's
		// postinst) and awk (an alternative of mawk's).
		"bin/sh":            {Link: "bash"},
		"usr/bin/awk":       {Link: "mawk"},
		"etc/passwd":        {Body: []byte("root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")},
		"etc/group":         {Body: []byte("root:x:0:\nnogroup:x:65534:\n")},
		"etc/nsswitch.conf": {Body: []byte("passwd: files\ngroup: files\nhosts: files dns\n")},
	}
	return dockerimage.Spec{
		Name: NodeImage, Base: b.rootfs, Files: files, Data: data,
		Changes: []string{dockerimage.EnvPath, `ENTRYPOINT ["/usr/local/bin/microlet-node-entrypoint"]`},
	}, nil
}

// runScript runs hack/<script> and returns its last line of output (the
// build scripts print the cache path they filled).
func runScript(ctx context.Context, repoRoot string, log io.Writer, script string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", script), args...)
	cmd.Dir, cmd.Stderr = repoRoot, log
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
