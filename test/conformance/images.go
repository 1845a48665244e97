package conformance

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/microlet/microlet/test/conformance/busyboxsh"
)

// Image names the suite pulls, exactly as k8s.io/kubernetes v1.36.3's
// test/utils/image/manifest.go spells them (e2e.test --list-images). The
// sig-node [Conformance] selection and the single-node [NodeConformance]
// one (SUITE=nodeconformance) run these; nothing else is prepared.
const (
	AgnhostImage     = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	AgnhostPrevImage = "registry.k8s.io/e2e-test-images/agnhost:2.55"
	BusyboxImage     = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	PauseImage       = "registry.k8s.io/pause:3.10.2"
	NginxImage       = "registry.k8s.io/e2e-test-images/nginx:1.15-4"
	NonewprivsImage  = "registry.k8s.io/e2e-test-images/nonewprivs:1.4"
	KittenImage      = "registry.k8s.io/e2e-test-images/kitten:1.8"
	// NonRootImage runs as user 1234 by its own USER line (the runAsNonRoot
	// spec "should run with an image specified user ID").
	NonRootImage = "registry.k8s.io/e2e-test-images/nonroot:1.5"
	// GlibcDNSTestingImage is Debian with dnsutils upstream: glibc programs
	// (the hostnameOverride specs run its `hostname -f`; the DNS specs its dig).
	GlibcDNSTestingImage = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
)

// Images only the full suite runs (SUITE=full on a make cluster cluster).
const (
	// NautilusImage is kitten's twin with nautilus.jpg (kubectl's Update
	// Demo specs).
	NautilusImage = "registry.k8s.io/e2e-test-images/nautilus:1.8"
	// NginxNewImage is the server-side apply specs' Deployment image.
	NginxNewImage = "registry.k8s.io/e2e-test-images/nginx:1.27-0"
	// SampleAPIServerImage is k8s.io/sample-apiserver, the aggregated API
	// the aggregator specs register; its etcd container runs EtcdImage.
	SampleAPIServerImage = "registry.k8s.io/e2e-test-images/sample-apiserver:1.29.2"
	EtcdImage            = "registry.k8s.io/etcd:3.6.8-0"
)

// labelContent is set on every image this package imports to the digest of
// its root filesystem and configuration, so a second run skips the import.
const labelContent = "io.microlet.conformance.content"

// ImageSources are the local files the images are made of.
type ImageSources struct {
	// Agnhost is a static agnhost (hack/build-e2e.sh agnhost).
	Agnhost string
	// Busybox is a static busybox with the applets the tests call
	// (Debian's busybox-static: /bin/busybox).
	Busybox string
	// Shell and ShellSwitch make the busybox image's /bin/sh pass every
	// environment variable on to the programs it runs, names that are not
	// shell identifiers ("p-data-1", "1-data-1", "$_-data-1") included, as
	// the ConfigMap and Secret envFrom specs require of `sh -c env`, and
	// still be busybox's ash otherwise (the read-only root filesystem spec
	// expects ash's exact error message). Debian's ash drops such names.
	// ShellSwitch is the static busybox-sh program (cmd/busybox-sh), /bin/sh
	// of the image: it runs ash, or Shell when the environment holds such a
	// name. Shell is a static bash (Debian's bash-static, /bin/bash-static),
	// POSIX mode under the name sh. Both empty leave ash as /bin/sh.
	Shell, ShellSwitch string
	// Pause is microlet's static pause program (services/runtime-shim/pause).
	Pause string
	// Nonewprivs is the static program of the nonewprivs image, which prints
	// its effective UID (hack/build-e2e.sh nonewprivs); installed setuid root.
	Nonewprivs string
	// AgnhostPrograms are host programs the agnhost image gets at the same
	// path, with the shared libraries ldd names: upstream's Alpine base has
	// curl, which the exec lifecycle-hook specs run.
	AgnhostPrograms []string
	// AgnhostFiles are extra files of the agnhost image keyed by their path in
	// it, e.g. porter's localhost.crt and .key from the module's
	// test/images/agnhost/porter.
	AgnhostFiles map[string]string
	// KittenFiles are the kitten image's files added to agnhost's, keyed by
	// their path in it: kitten.jpg and data.json from the module's
	// test/images/kitten/html.
	KittenFiles map[string]string
	// NautilusFiles are the nautilus image's files added to agnhost's:
	// nautilus.jpg and data.json from the module's test/images/nautilus/html.
	NautilusFiles map[string]string
	// SampleAPIServer is a static k8s.io/sample-apiserver (hack/build-e2e.sh
	// sample-apiserver) and Etcd a static etcd server (the control plane's,
	// hack/build-etcd.sh); both empty leave the aggregator's
	// images out (the single-node selections do not run them).
	SampleAPIServer, Etcd string
	// DNSPrograms are glibc programs the DNS specs' queriers run in both the
	// agnhost and the glibc-dns-testing images: dig (Debian's bind9-dnsutils)
	// and getent (libc-bin), with their libraries, where the host has them.
	DNSPrograms []string
	// Netcat is OpenBSD's netcat (Debian's netcat-openbsd: /bin/nc.openbsd),
	// the agnhost image's nc as upstream's Alpine image has it: the
	// Services specs run `nc -v -t -w 2 HOST PORT` and `nc -v -z -w 2 ...`,
	// options busybox's nc lacks. Empty leaves busybox's.
	Netcat string
	// GlibcPrograms are host programs linked against glibc that the
	// glibc-dns-testing image gets at their own paths, with their shared
	// libraries, over busybox's applets of the same name: Debian's
	// /bin/hostname at least (its -f resolves through glibc and the pod's
	// /etc/hosts, which the hostnameOverride specs check), dig and nslookup
	// when the host has them.
	GlibcPrograms []string
}

// PrepareImages imports into the local Docker engine every image the
// selected tests run, under its exact registry.k8s.io name, built from
// local files only (nothing can be pulled here). An image whose content
// label already matches is left alone. Progress goes to log.
func PrepareImages(ctx context.Context, src ImageSources, log io.Writer) error {
	imgs, err := imageTrees(src)
	if err != nil {
		return err
	}
	for _, img := range imgs {
		if err := importImage(ctx, img.tree, img.names, log); err != nil {
			return err
		}
	}
	return nil
}

// ImageNames lists the name of every image PrepareImages imports for src.
func ImageNames(src ImageSources) ([]string, error) {
	trees, err := imageTrees(src)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range trees {
		names = append(names, t.names...)
	}
	return names, nil
}

// namedTree is an image's filesystem and the names it gets.
type namedTree struct {
	names []string
	tree  *tree
}

// imageTrees builds every image of PrepareImages.
func imageTrees(src ImageSources) ([]namedTree, error) {
	bb, err := busyboxTree(src.Busybox)
	if err != nil {
		return nil, err
	}
	busybox, err := busyboxImage(bb, src.Shell, src.ShellSwitch)
	if err != nil {
		return nil, err
	}

	// agnhost: the Dockerfile's entrypoint, default command, ports, uploads
	// directory, agnhost-2 link and image-defined user and group, on the
	// applets the tests exec (sh, cat, ls, ...) where upstream has Alpine's.
	agn := bb.clone()
	if err := agn.addFile("agnhost", src.Agnhost, 0o755); err != nil {
		return nil, err
	}
	agn.symlink("agnhost-2", "agnhost")
	agn.dir("uploads", 0o755)
	// The real image has bash (its Dockerfile installs it); probe specs run
	// /bin/bash -c with traps in it.
	// Its /bin/sh is that bash too (POSIX mode under the name sh): Debian's
	// busybox ash runs its own applets before anything on PATH, so the
	// Services specs' `nc -v -t ...` would get busybox's nc even with
	// OpenBSD's installed; upstream's Alpine ash finds commands on PATH.
	if src.Shell != "" {
		if err := agn.addFile("bin/bash", src.Shell, 0o755); err != nil {
			return nil, err
		}
		agn.symlink("bin/sh", "bash")
	}
	for _, prog := range append(append([]string{}, src.AgnhostPrograms...), src.DNSPrograms...) {
		if err := agn.addProgram(prog); err != nil {
			return nil, err
		}
	}
	if src.Netcat != "" {
		if err := agn.addProgram(src.Netcat); err != nil {
			return nil, err
		}
		for _, l := range []string{"bin/nc", "usr/bin/nc"} {
			agn.symlink(l, src.Netcat)
		}
	}
	// Upstream's Alpine resolves hosts from /etc/hosts first; getent does
	// the same with glibc only when nsswitch.conf says so.
	agn.text("etc/nsswitch.conf", nsswitch, 0o644)
	for dst, file := range src.AgnhostFiles {
		if err := agn.addFile(strings.TrimPrefix(dst, "/"), file, 0o644); err != nil {
			return nil, err
		}
	}
	agn.text("etc/passwd", passwd+"user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n", 0o644)
	agn.text("etc/group", group+"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n", 0o644)
	agn.dir("home/user-defined-in-image", 0o755)
	agn.changes = []string{envPath, `ENTRYPOINT ["/agnhost"]`, `CMD ["pause"]`,
		"EXPOSE 80", "EXPOSE 8080", "EXPOSE 8081", "EXPOSE 9376", "EXPOSE 5000"}

	// pause: the sandbox program alone, as registry.k8s.io/pause (user 65535).
	pause := newTree()
	if err := pause.addFile("pause", src.Pause, 0o755); err != nil {
		return nil, err
	}
	pause.changes = []string{`ENTRYPOINT ["/pause"]`, "USER 65535:65535"}

	// nginx: the one test that runs it (the back-off reset after an image
	// update) needs only a container that keeps running; busybox httpd
	// serves on 80 as nginx would.
	nginx := bb.clone()
	nginx.text("usr/share/nginx/html/index.html", "<html><body>microlet conformance stand-in for nginx (busybox httpd)</body></html>\n", 0o644)
	nginx.changes = []string{envPath, `CMD ["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"]`, "EXPOSE 80"}

	// nonewprivs: a setuid-root program on busybox, as upstream's image.
	nnp := bb.clone()
	if err := nnp.addFile("usr/local/bin/nnp", src.Nonewprivs, 0o4755); err != nil {
		return nil, err
	}
	nnp.changes = []string{envPath, `CMD ["nnp"]`}

	kitten, err := webTree(agn, "kitten", src.KittenFiles)
	if err != nil {
		return nil, err
	}
	kitten.text("etc/os-release", kittenOSRelease, 0o644)

	// nonroot: upstream's is debian-base with `USER 1234` and nothing else;
	// the specs run `id -u` in it.
	nonroot := bb.clone()
	nonroot.changes = []string{envPath, "USER 1234", `CMD ["sh"]`}

	glibc, err := glibcDNSTree(bb, src.Shell, append(append([]string{}, src.GlibcPrograms...), src.DNSPrograms...))
	if err != nil {
		return nil, err
	}

	trees := []namedTree{
		{[]string{KittenImage}, kitten},
		{[]string{BusyboxImage}, busybox},
		{[]string{AgnhostImage, AgnhostPrevImage}, agn},
		{[]string{PauseImage}, pause},
		{[]string{NginxImage, NginxNewImage}, nginx},
		{[]string{NonewprivsImage}, nnp},
		{[]string{NonRootImage}, nonroot},
		{[]string{GlibcDNSTestingImage}, glibc},
	}
	if src.NautilusFiles != nil {
		nautilus, err := webTree(agn, "nautilus", src.NautilusFiles)
		if err != nil {
			return nil, err
		}
		trees = append(trees, namedTree{[]string{NautilusImage}, nautilus})
	}
	if src.SampleAPIServer != "" || src.Etcd != "" {
		sample, etcd, err := aggregatorTrees(bb, src.SampleAPIServer, src.Etcd)
		if err != nil {
			return nil, err
		}
		trees = append(trees, namedTree{[]string{SampleAPIServerImage}, sample}, namedTree{[]string{EtcdImage}, etcd})
	}
	return trees, nil
}

// aggregatorTrees are the aggregator specs' two images: upstream's
// sample-apiserver image is the static program as its entrypoint; its etcd
// image runs /usr/local/bin/etcd, here the control plane's static etcd.
func aggregatorTrees(bb *tree, sampleAPIServer, etcd string) (sample, etcdImage *tree, err error) {
	if sampleAPIServer == "" || etcd == "" {
		return nil, nil, fmt.Errorf("the aggregator's images need both sample-apiserver (%q) and etcd (%q)", sampleAPIServer, etcd)
	}
	sample = bb.clone()
	if err := sample.addFile("sample-apiserver", sampleAPIServer, 0o755); err != nil {
		return nil, nil, err
	}
	sample.changes = []string{envPath, `ENTRYPOINT ["/sample-apiserver"]`}
	etcdImage = bb.clone()
	if err := etcdImage.addFile("usr/local/bin/etcd", etcd, 0o755); err != nil {
		return nil, nil, err
	}
	etcdImage.changes = []string{envPath, `CMD ["/usr/local/bin/etcd"]`}
	return sample, etcdImage, nil
}

// nsswitch is Debian's /etc/nsswitch.conf (package libc-bin) for the
// glibc image: names resolve through /etc/hosts before DNS. Without the
// file glibc asks DNS first and stops at its "not found", so `hostname -f`
// would never read the hosts file the kubelet writes.
const nsswitch = `passwd:         files
group:          files
shadow:         files
gshadow:        files
hosts:          files dns
networks:       files
protocols:      db files
services:       db files
ethers:         db files
rpc:            db files
netgroup:       nis
`

// glibcDNSTree is the glibc-dns-testing image: upstream's is Debian
// bookworm-slim with dnsutils, a glibc system whose CMD is bash. Here it
// is busybox's applets with the given glibc programs of the host over
// them (hostname, dig ...), Debian's nsswitch.conf, and the static bash
// as /bin/bash.
func glibcDNSTree(bb *tree, bash string, programs []string) (*tree, error) {
	if len(programs) == 0 {
		return nil, errors.New("the glibc-dns-testing image needs glibc programs (at least Debian's /bin/hostname)")
	}
	t := bb.clone()
	for _, prog := range programs {
		if err := t.addProgram(prog); err != nil {
			return nil, err
		}
	}
	t.text("etc/nsswitch.conf", nsswitch, 0o644)
	cmd := `CMD ["sh"]`
	if bash != "" {
		if err := t.addFile("bin/bash", bash, 0o755); err != nil {
			return nil, err
		}
		cmd = `CMD ["bash"]`
	}
	t.changes = []string{envPath, cmd}
	return t, nil
}

// kittenOSRelease is the kitten stand-in's /etc/os-release: upstream's
// kitten is agnhost's Alpine image plus two files, and the image volume
// spec reads "Alpine Linux" from it to see the image's base is mounted.
const kittenOSRelease = `NAME="microlet conformance stand-in"
PRETTY_NAME="microlet conformance stand-in for registry.k8s.io/e2e-test-images/kitten (upstream's base: Alpine Linux)"
ID=microlet-conformance
`

// webTree is the kitten or nautilus image (upstream's Dockerfiles): the
// agnhost stand-in plus name.jpg and data.json at its root, its command
// agnhost's test-webserver.
func webTree(agn *tree, name string, files map[string]string) (*tree, error) {
	t := agn.clone()
	for _, f := range []string{name + ".jpg", "data.json"} {
		if files[f] == "" {
			return nil, fmt.Errorf("the %s image needs %s (test/images/%s/html of the module)", name, f, name)
		}
		if err := t.addFile(f, files[f], 0o644); err != nil {
			return nil, err
		}
	}
	t.changes = []string{envPath, `ENTRYPOINT ["/agnhost"]`, `CMD ["test-webserver"]`, "EXPOSE 80"}
	return t, nil
}

// busyboxImage is the busybox image: the applets under their usual paths,
// as upstream's, and, when shell and shellSwitch are set, shellSwitch as
// /bin/sh choosing between busybox's ash and shell (ImageSources.Shell).
// Upstream's busybox sh hands the envFrom specs' variables such as
// p-data-1 to env; busybox's ash, as Debian builds it, exports only
// variables whose names are identifiers.
func busyboxImage(bb *tree, shell, shellSwitch string) (*tree, error) {
	t := bb.clone()
	if (shell == "") != (shellSwitch == "") {
		return nil, fmt.Errorf("the busybox image's sh needs both a static bash (%q) and busybox-sh (%q)", shell, shellSwitch)
	}
	if shell != "" {
		if err := t.addFile("bin/sh", shellSwitch, 0o755); err != nil {
			return nil, err
		}
		if err := t.addFile(strings.TrimPrefix(busyboxsh.Bash, "/"), shell, 0o755); err != nil {
			return nil, err
		}
	}
	t.changes = []string{envPath, `CMD ["sh"]`}
	return t, nil
}

// Minimal account databases, with the names the tests and images expect.
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\nwww-data:x:33:33:www-data:/var/www:/bin/false\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
	group  = "root:x:0:\ndaemon:x:1:\nwww-data:x:33:\nnogroup:x:65534:\nnobody:x:65534:\n"
)

// envPath is the search path every image sets, as upstream's do.
const envPath = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// busyboxTree is a root filesystem with busybox and a link per applet in
// /bin, where upstream's busybox image has them all (the specs run
// /bin/sysctl), and at the path busybox itself names (--list-full), plus
// /etc and the usual directories.
func busyboxTree(busybox string) (*tree, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w (install Debian's busybox-static)", busybox, err)
	}
	t := newTree()
	if err := t.addFile("bin/busybox", busybox, 0o755); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "bin/busybox" {
			continue
		}
		// Relative links keep working wherever the tree is mounted.
		rel := strings.Repeat("../", strings.Count(applet, "/")) + "bin/busybox"
		t.symlink(applet, rel)
		if inBin := "bin/" + path.Base(applet); inBin != applet && inBin != "bin/busybox" {
			t.symlink(inBin, "busybox")
		}
	}
	t.text("etc/passwd", passwd, 0o644)
	t.text("etc/group", group, 0o644)
	for _, d := range []string{"root", "home", "var/www", "var/spool/mail", "dev", "proc", "sys", "etc"} {
		t.dir(d, 0o755)
	}
	t.dir("tmp", 0o1777)
	return t, nil
}

// tree is an image's root filesystem held in memory, written as a
// reproducible tar (sorted, one fixed time, owned by root).
type tree struct {
	entries map[string]*tar.Header
	data    map[string][]byte
	changes []string // docker import --change instructions
}

func newTree() *tree { return &tree{entries: map[string]*tar.Header{}, data: map[string][]byte{}} }

func (t *tree) clone() *tree {
	c := newTree()
	for k, h := range t.entries {
		hc := *h
		c.entries[k] = &hc
	}
	for k, d := range t.data {
		c.data[k] = d
	}
	c.changes = append([]string(nil), t.changes...)
	return c
}

// parents adds the directories above name.
func (t *tree) parents(name string) {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if _, ok := t.entries[d]; !ok {
			t.dir(d, 0o755)
		}
	}
}

func (t *tree) dir(name string, mode int64) {
	t.parents(name)
	t.entries[name] = &tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: mode}
}

func (t *tree) symlink(name, target string) {
	t.parents(name)
	t.entries[name] = &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}
	delete(t.data, name)
}

func (t *tree) text(name, content string, mode int64) { t.bytes(name, []byte(content), mode) }

func (t *tree) bytes(name string, b []byte, mode int64) {
	t.parents(name)
	t.entries[name] = &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(b))}
	t.data[name] = b
}

func (t *tree) addFile(name, src string, mode int64) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("image file /%s: %w", name, err)
	}
	t.bytes(name, b, mode)
	return nil
}

// addProgram adds a dynamically linked host program at its own path with
// every library ldd lists (links resolved: the file's content under the
// name the loader looks for).
func (t *tree) addProgram(prog string) error {
	if err := t.addFile(strings.TrimPrefix(prog, "/"), prog, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("ldd", prog).Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", prog, err)
	}
	// ldd prints "lib => /path (addr)" and the loader as "/path (addr)".
	for _, f := range strings.Fields(string(out)) {
		if !strings.HasPrefix(f, "/") {
			continue
		}
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return fmt.Errorf("%s needs %s: %w", prog, f, err)
		}
		if err := t.addFile(strings.TrimPrefix(f, "/"), real, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// epoch is every entry's time, so equal content makes an equal tar.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func (t *tree) writeTar(w io.Writer) error {
	names := make([]string, 0, len(t.entries))
	for n := range t.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		h := *t.entries[n]
		h.ModTime, h.Format = epoch, tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(t.data[n]); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// importImage imports the tree as names[0] with its changes and tags the
// other names, unless names[0] already carries the same content label.
func importImage(ctx context.Context, t *tree, names []string, log io.Writer) error {
	var buf bytes.Buffer
	if err := t.writeTar(&buf); err != nil {
		return err
	}
	h := sha256.New()
	h.Write(buf.Bytes())
	for _, c := range t.changes {
		fmt.Fprintf(h, "\x00%s", c)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	for _, name := range names {
		got, _ := exec.CommandContext(ctx, "docker", "image", "inspect", "-f", fmt.Sprintf("{{index .Config.Labels %q}}", labelContent), name).Output()
		if strings.TrimSpace(string(got)) != sum {
			break
		}
		if name == names[len(names)-1] {
			fmt.Fprintf(log, "image %s: up to date\n", strings.Join(names, ", "))
			return nil
		}
	}
	args := []string{"import"}
	for _, c := range append(t.changes, "LABEL "+labelContent+"="+sum) {
		args = append(args, "--change", c)
	}
	args = append(args, "-", names[0])
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import %s: %w: %s", names[0], err, bytes.TrimSpace(out))
	}
	for _, other := range names[1:] {
		if out, err := exec.CommandContext(ctx, "docker", "tag", names[0], other).CombinedOutput(); err != nil {
			return fmt.Errorf("docker tag %s %s: %w: %s", names[0], other, err, bytes.TrimSpace(out))
		}
	}
	fmt.Fprintf(log, "image %s: imported (%d files, content %s)\n", strings.Join(names, ", "), len(t.entries), sum)
	return nil
}
