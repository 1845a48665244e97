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
	EnvKubelet    = "MICROLET_KUBELET"
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

// FindKubelet returns $MICROLET_KUBELET, else the upstream kubelet that
// hack/build-kubelet.sh caches for the k8s.io/kubernetes version pinned in
// test/controlplane/go.mod. Only `make conformance RUNTIME_ONLY=1` builds
// it; a missing binary wraps controlplane.ErrMissingBinary.
func FindKubelet() (string, error) {
	return controlplane.FindCached("test/controlplane/go.mod", "kubelet", EnvKubelet, "hack/build-kubelet.sh")
}

func findBuilt(name, env string) (string, error) {
	return controlplane.FindCached(upstreamModule+"/go.mod", name, env, "hack/build-e2e.sh")
}

// hostCurl is the curl the agnhost image gets (Debian's package curl).
const hostCurl = "/usr/bin/curl"

// hostHostname is Debian's hostname (package hostname), linked against
// glibc: the glibc-dns-testing image's.
const hostHostname = "/bin/hostname"

// hostDNSTools are the programs the DNS specs' queriers run, in the agnhost
// and glibc-dns-testing images (ImageSources.DNSPrograms): the dnsutils of
// Debian's bind9-dnsutils and glibc's getent (libc-bin), each when the host
// has it; only the cluster's DNS specs run them.
var hostDNSTools = []string{"/usr/bin/dig", "/usr/bin/nslookup", "/usr/bin/host", "/usr/bin/getent"}

// hostNetcat is the agnhost image's nc (Debian's netcat-openbsd),
// ImageSources.Netcat.
const hostNetcat = "/bin/nc.openbsd"

// hostShell is the busybox image's sh (Debian's package bash-static):
// ImageSources.Shell.
const hostShell = "/bin/bash-static"

// BusyboxShPackage is the busybox image's /bin/sh (ImageSources.ShellSwitch),
// built with the node's binaries.
const BusyboxShPackage = "github.com/microlet/microlet/test/conformance/cmd/busybox-sh"

// DefaultImageSources are the images' inputs on this machine: the programs
// as given (FindAgnhost, FindNonewprivs, microlet's pause, busybox-sh), Debian's
// /bin/busybox, /bin/bash-static, /usr/bin/curl, /bin/nc.openbsd and /bin/hostname (dig,
// nslookup, host and getent too where installed), porter's certificate pair
// from the agnhost sources of the pinned module (in the module cache), and
// the kitten and nautilus images' files from the same sources.
func DefaultImageSources(ctx context.Context, agnhost, nonewprivs, pause, busyboxSh string) (ImageSources, error) {
	src := ImageSources{Agnhost: agnhost, Nonewprivs: nonewprivs, Busybox: "/bin/busybox", Shell: hostShell, ShellSwitch: busyboxSh, Pause: pause,
		AgnhostFiles: map[string]string{}, AgnhostPrograms: []string{hostCurl}}
	if agnhost == "" || nonewprivs == "" || pause == "" || busyboxSh == "" {
		return src, errors.New("the agnhost, nonewprivs, pause and busybox-sh programs are required")
	}
	if _, err := os.Stat(hostCurl); err != nil {
		return src, fmt.Errorf("the agnhost image needs %s (apt-get install curl): %w", hostCurl, err)
	}
	if _, err := os.Stat(hostShell); err != nil {
		return src, fmt.Errorf("the busybox image's sh is %s (apt-get install bash-static): %w", hostShell, err)
	}
	if _, err := os.Stat(hostHostname); err != nil {
		return src, fmt.Errorf("the glibc-dns-testing image needs %s (apt-get install hostname): %w", hostHostname, err)
	}
	if _, err := os.Stat(hostNetcat); err != nil {
		return src, fmt.Errorf("the agnhost image's nc is %s (apt-get install netcat-openbsd): %w", hostNetcat, err)
	}
	src.Netcat = hostNetcat
	src.GlibcPrograms = []string{hostHostname}
	for _, p := range hostDNSTools {
		if _, err := os.Stat(p); err == nil {
			src.DNSPrograms = append(src.DNSPrograms, p)
		}
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
	src.KittenFiles = map[string]string{}
	src.NautilusFiles = map[string]string{}
	for _, name := range []string{"kitten.jpg", "data.json"} {
		src.KittenFiles[name] = filepath.Join(dir, "test/images/kitten/html", name)
	}
	for _, name := range []string{"nautilus.jpg", "data.json"} {
		src.NautilusFiles[name] = filepath.Join(dir, "test/images/nautilus/html", name)
	}
	return src, nil
}

// WithAggregator adds the aggregator specs' images to src: sampleAPIServer
// (hack/build-e2e.sh sample-apiserver) and the etcd server the control plane
// runs (hack/build-etcd.sh; controlplane.FindEtcd).
func (src *ImageSources) WithAggregator(sampleAPIServer string) error {
	etcd, err := controlplane.FindEtcd()
	if err != nil {
		return fmt.Errorf("the aggregator's etcd image: %w", err)
	}
	src.SampleAPIServer, src.Etcd = sampleAPIServer, etcd
	return nil
}
