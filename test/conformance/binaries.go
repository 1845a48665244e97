package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// Environment variables that point at prebuilt programs instead of the
// cache hack/build-e2e.sh fills.
const (
	EnvE2ETest    = "MICROLET_E2E_TEST"
	EnvAgnhost    = "MICROLET_AGNHOST"
	EnvNonewprivs = "MICROLET_NONEWPRIVS"
)

// upstreamModule is the module the suite is built from, relative to the
// repository root.
const upstreamModule = "test/conformance/upstream"

// FindE2ETest returns $MICROLET_E2E_TEST, else the e2e.test that
// hack/build-e2e.sh caches for the k8s.io/kubernetes version pinned in
// test/conformance/upstream/go.mod. It never builds (minutes of CPU belong
// to make test-deps). A missing binary wraps controlplane.ErrMissingBinary.
func FindE2ETest() (string, error) { return findBuilt("e2e.test", EnvE2ETest) }

// FindAgnhost is FindE2ETest for the agnhost program.
func FindAgnhost() (string, error) { return findBuilt("agnhost", EnvAgnhost) }

// FindNonewprivs is FindE2ETest for the nonewprivs image's program.
func FindNonewprivs() (string, error) { return findBuilt("nonewprivs", EnvNonewprivs) }

func findBuilt(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return executable(p)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return "", err
	}
	version, err := kubernetesVersion(filepath.Join(root, upstreamModule, "go.mod"))
	if err != nil {
		return "", err
	}
	return executable(filepath.Join(cacheDir(), name, version, name))
}

// kubernetesVersion reads the k8s.io/kubernetes requirement of a go.mod.
func kubernetesVersion(gomod string) (string, error) {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == "k8s.io/kubernetes" {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("%s: no k8s.io/kubernetes requirement", gomod)
}

// cacheDir is the cache root hack/build-e2e.sh (and hack/build-k8s.sh) use.
func cacheDir() string {
	if d := os.Getenv("MICROLET_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "microlet")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "/root"
	}
	return filepath.Join(home, ".cache", "microlet")
}

func executable(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s (build it with: make test-deps, or hack/build-e2e.sh)", controlplane.ErrMissingBinary, p)
	}
	return p, nil
}

// hostCurl is the curl the agnhost image gets (Debian's package curl).
const hostCurl = "/usr/bin/curl"

// DefaultImageSources are the images' inputs on this machine: the programs
// as given (FindAgnhost, FindNonewprivs, microlet's pause), Debian's
// /bin/busybox and /usr/bin/curl, and porter's certificate pair from the
// agnhost sources of the pinned module (in the module cache).
func DefaultImageSources(ctx context.Context, agnhost, nonewprivs, pause string) (ImageSources, error) {
	src := ImageSources{Agnhost: agnhost, Nonewprivs: nonewprivs, Busybox: "/bin/busybox", Pause: pause,
		AgnhostFiles: map[string]string{}, AgnhostPrograms: []string{hostCurl}}
	if agnhost == "" || nonewprivs == "" || pause == "" {
		return src, errors.New("the agnhost, nonewprivs and pause programs are required")
	}
	if _, err := os.Stat(hostCurl); err != nil {
		return src, fmt.Errorf("the agnhost image needs %s (apt-get install curl): %w", hostCurl, err)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return src, err
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes")
	cmd.Dir = filepath.Join(root, upstreamModule)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return src, fmt.Errorf("go list -m k8s.io/kubernetes in %s: %w", upstreamModule, err)
	}
	dir := strings.TrimSpace(string(out))
	for _, name := range []string{"localhost.crt", "localhost.key"} {
		src.AgnhostFiles[name] = filepath.Join(dir, "test/images/agnhost/porter", name)
	}
	return src, nil
}
