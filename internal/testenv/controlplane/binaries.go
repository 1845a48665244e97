package controlplane

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/microlet/microlet/internal/testenv"
)

// Environment variables that locate the binaries and tune the harness.
const (
	// EnvKubeAPIServer overrides where the kube-apiserver binary is found.
	EnvKubeAPIServer = "MICROLET_KUBE_APISERVER"
	// EnvKubectl overrides where the kubectl binary is found.
	EnvKubectl = "MICROLET_KUBECTL"
	// EnvKubeScheduler overrides where the kube-scheduler binary is found.
	EnvKubeScheduler = "MICROLET_KUBE_SCHEDULER"
	// EnvKubeControllerManager overrides where the kube-controller-manager
	// binary is found.
	EnvKubeControllerManager = "MICROLET_KUBE_CONTROLLER_MANAGER"
	// EnvEtcd overrides where the etcd binary is found (default: the
	// build hack/build-etcd.sh caches).
	EnvEtcd = "MICROLET_ETCD"
	// EnvRequire turns a missing control plane from a skip into a failure;
	// `make test` sets it so CI can never pass by skipping.
	EnvRequire = testenv.EnvRequire
	// EnvKeep keeps the control plane's directory (logs, certs, data)
	// after Stop, for post-mortems.
	EnvKeep = "MICROLET_KEEP_CONTROLPLANE"
)

// controlPlaneModule is where the pinned k8s.io/kubernetes version lives,
// relative to the repository root.
const controlPlaneModule = "test/controlplane/go.mod"

// etcdModule pins the etcd server's version (the one kubeadm deploys with
// the pinned Kubernetes), relative to the repository root.
const etcdModule = "test/controlplane/etcd/go.mod"

// kubernetesModule and etcdServerModule are the requirements whose
// versions key the build caches.
const (
	kubernetesModule = "k8s.io/kubernetes"
	etcdServerModule = "go.etcd.io/etcd/server/v3"
)

// ErrMissingBinary is wrapped by Start when etcd, kube-apiserver or a
// component it was asked for cannot be found, and by the Find functions;
// Get, GetFull and Kubectl turn it into a skip unless
// MICROLET_REQUIRE_CONTROLPLANE=1.
var ErrMissingBinary = errors.New("control-plane binary missing (install with: make test-deps)")

// FindKubeAPIServer returns the kube-apiserver to run: $MICROLET_KUBE_APISERVER,
// else the binary hack/build-kube-apiserver.sh caches for the version pinned
// in test/controlplane/go.mod. It does not build: a build takes minutes and
// belongs to `make test-deps`, not to a test.
func FindKubeAPIServer() (string, error) {
	return findBuilt("kube-apiserver", EnvKubeAPIServer)
}

// FindKubectl returns the kubectl to drive the control plane with:
// $MICROLET_KUBECTL, else the binary hack/build-kubectl.sh caches for the
// version pinned in test/controlplane/go.mod (the same version as the
// kube-apiserver). Like FindKubeAPIServer it never builds.
func FindKubectl() (string, error) {
	return findBuilt("kubectl", EnvKubectl)
}

// FindKubeScheduler returns the kube-scheduler to run:
// $MICROLET_KUBE_SCHEDULER, else the binary hack/build-kube-scheduler.sh
// caches for the pinned version. Like FindKubeAPIServer it never builds.
func FindKubeScheduler() (string, error) {
	return findBuilt(KubeScheduler, EnvKubeScheduler)
}

// FindKubeControllerManager returns the kube-controller-manager to run:
// $MICROLET_KUBE_CONTROLLER_MANAGER, else the binary
// hack/build-kube-controller-manager.sh caches for the pinned version.
// Like FindKubeAPIServer it never builds.
func FindKubeControllerManager() (string, error) {
	return findBuilt(KubeControllerManager, EnvKubeControllerManager)
}

// findBuilt locates a binary that hack/build-k8s.sh builds from the
// test/controlplane module.
func findBuilt(name, env string) (string, error) {
	return FindCached(controlPlaneModule, name, env, "hack/build-"+name+".sh")
}

// FindCached locates a binary a hack/ build script caches by Kubernetes
// version: the environment override env, else
// <cache>/<name>/<version>/<name>, where version is the k8s.io/kubernetes
// requirement of gomod (relative to the repository root) and the cache root
// is the one the scripts use. It never builds; a missing binary wraps
// ErrMissingBinary and names script.
func FindCached(gomod, name, env, script string) (string, error) {
	return findCachedAt(gomod, kubernetesModule, name, env, script)
}

// findCachedAt is FindCached with the cache keyed by the version of module
// in gomod.
func findCachedAt(gomod, module, name, env, script string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return checkExecutable(p, env)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v; or set %s", ErrMissingBinary, name, err, env)
	}
	version, err := pinnedVersion(filepath.Join(root, gomod), module)
	if err != nil {
		return "", err
	}
	p := filepath.Join(cacheDir(), name, version, name)
	return checkExecutable(p, script+" cache")
}

// FindEtcd returns $MICROLET_ETCD, else the static etcd server
// hack/build-etcd.sh caches for the version pinned in
// test/controlplane/etcd/go.mod. An etcd on PATH is not used: its version
// (Debian's is 3.4) decides what the apiserver's watch cache can ask of it.
// Like FindKubeAPIServer it never builds.
func FindEtcd() (string, error) {
	return findCachedAt(etcdModule, etcdServerModule, "etcd", EnvEtcd, "hack/build-etcd.sh")
}

// RepoRoot walks up from the working directory (a test runs in its
// package's directory) to the directory holding test/controlplane/go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, controlPlaneModule)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s above the working directory", controlPlaneModule)
		}
		dir = parent
	}
}

// cacheDir mirrors hack/build-k8s.sh so both agree on one path.
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

// pinnedVersion returns the version gomod requires of module.
func pinnedVersion(gomod, module string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && fields[0] == "require" {
			fields = fields[1:]
		}
		if len(fields) >= 2 && fields[0] == module {
			return fields[1], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no %s requirement", gomod, module)
}

func checkExecutable(p, source string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s (from %s)", ErrMissingBinary, p, source)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s (from %s) is not an executable file", ErrMissingBinary, p, source)
	}
	return p, nil
}
