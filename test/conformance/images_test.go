package conformance

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
)

func TestBusyboxTree(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		testenv.RequireOrSkip(t, "/bin/busybox: %v (apt-get install busybox-static)", err)
	}
	tr, err := busyboxTree("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	// Every applet is in /bin, where upstream's image has them (specs run
	// /bin/sysctl, /bin/sh, /bin/sleep ...), besides busybox's own paths.
	for _, name := range []string{"bin/sh", "bin/sysctl", "bin/sleep", "bin/env", "usr/bin/env"} {
		h, ok := tr.entries[name]
		if !ok || h.Typeflag != tar.TypeSymlink {
			t.Errorf("%s: %+v, want a link to busybox", name, h)
		}
	}
	if h := tr.entries["tmp"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp: %+v, want mode 1777", h)
	}
	if p := string(tr.data["etc/passwd"]); !strings.Contains(p, "nobody:x:65534:65534:") {
		t.Errorf("etc/passwd lacks nobody:\n%s", p)
	}

	// The tar is reproducible and lists every parent directory first.
	var a, b bytes.Buffer
	if err := tr.writeTar(&a); err != nil {
		t.Fatal(err)
	}
	if err := tr.clone().writeTar(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two tars of the same tree differ")
	}
	seen := map[string]bool{}
	r := tar.NewReader(&a)
	for {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if i := strings.LastIndex(name, "/"); i > 0 && !seen[name[:i]] {
			t.Errorf("%s comes before its directory %s", h.Name, name[:i])
		}
		seen[name] = true
	}
}

func TestAddProgram(t *testing.T) {
	if _, err := os.Stat(hostCurl); err != nil {
		testenv.RequireOrSkip(t, "%v (apt-get install curl)", err)
	}
	tr := newTree()
	if err := tr.addProgram(hostCurl); err != nil {
		t.Fatal(err)
	}
	var libs, loader int
	for name := range tr.entries {
		if strings.Contains(name, "libcurl") {
			libs++
		}
		if strings.Contains(name, "ld-linux") {
			loader++
		}
	}
	if _, ok := tr.entries["usr/bin/curl"]; !ok || libs == 0 || loader == 0 {
		t.Errorf("curl's tree lacks the program, libcurl or the loader: %d entries", len(tr.entries))
	}
}

// TestBusyboxImageShell imports the busybox image with busybox-sh as sh
// under a test name and runs in it, through Docker, what the specs run:
// the ConfigMap and Secret envFrom specs' `sh -c env` with variables whose
// names are not shell identifiers (all must be printed), the read-only
// root filesystem spec's write (ash's exact message), and a few other
// `sh -c` forms the suite uses on busybox.
func TestBusyboxImageShell(t *testing.T) {
	if testing.Short() {
		t.Skip("imports an image into Docker")
	}
	for _, f := range []string{"/bin/busybox", hostShell} {
		if _, err := os.Stat(f); err != nil {
			testenv.RequireOrSkip(t, "%v (apt-get install busybox-static bash-static)", err)
		}
	}
	if err := exec.Command("docker", "version").Run(); err != nil {
		testenv.RequireOrSkip(t, "docker not reachable: %v", err)
	}
	bb, err := busyboxTree("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	bins := testenv.Build(t, nil, BusyboxShPackage)
	img, err := busyboxImage(bb, hostShell, filepath.Join(bins, "busybox-sh"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := importForTest(ctx, t, img, "busybox")

	run := func(flags, env []string, cmd ...string) (string, int) {
		t.Helper()
		flags = slices.Clone(flags)
		for _, e := range env {
			flags = append(flags, "-e", e)
		}
		return dockerRun(ctx, t, name, flags, cmd...)
	}

	// The names the envFrom specs give: the ConfigMap's keys with the
	// prefixes "", "p-", "1-", "$_-", "ABC_" and "#@!".
	var env []string
	for _, prefix := range []string{"", "p-", "1-", "$_-", "ABC_", "#@!"} {
		env = append(env, prefix+"data-1=value-1")
	}
	out, code := run(nil, env, "sh", "-c", "env")
	if code != 0 {
		t.Fatalf("sh -c env: exit %d: %s", code, out)
	}
	lines := strings.Split(out, "\n")
	for _, w := range env {
		if !slices.Contains(lines, w) {
			t.Errorf("sh -c env lacks %q:\n%s", w, out)
		}
	}

	// Without such names sh is busybox's ash: the read-only root
	// filesystem spec compares its message byte for byte.
	if out, code := run([]string{"--read-only"}, nil, "/bin/sh", "-c", "echo test > /file"); out != "/bin/sh: can't create /file: Read-only file system\n" || code == 0 {
		t.Errorf("write to a read-only root: %q exit %d, want ash's message", out, code)
	}

	// Either shell is a POSIX sh running busybox's applets: exit statuses,
	// variables, tests, pipes, traps.
	for _, env := range [][]string{nil, {"p-x=1"}} {
		for _, c := range []struct {
			script, want string
			code         int
		}{
			{"echo $HOME; exit 3", "/root\n", 3},
			{"[ -d /tmp ] && ls / | grep -c '^bin$'", "1\n", 0},
			{"trap 'echo bye' EXIT; cat /etc/hostname >/dev/null; echo hi", "hi\nbye\n", 0},
			{"readlink /bin/env; busybox --help >/dev/null && echo applets", "busybox\napplets\n", 0},
		} {
			if out, code := run(nil, env, "/bin/sh", "-c", c.script); out != c.want || code != c.code {
				t.Errorf("env %q: sh -c %q: %q exit %d, want %q exit %d", env, c.script, out, code, c.want, c.code)
			}
		}
	}
}

// dockerRun runs cmd in a throw-away container of image with the extra
// docker run flags and returns its output and exit code.
func dockerRun(ctx context.Context, t *testing.T, image string, flags []string, cmd ...string) (string, int) {
	t.Helper()
	args := append([]string{"run", "--rm", "--label", "io.microlet.test=conformance-images"}, flags...)
	args = append(append(args, image), cmd...)
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("docker %v: %v: %s", args, err, out)
	}
	return string(out), 0
}

// importForTest imports a tree under a unique test name, removed when the
// test ends.
func importForTest(ctx context.Context, t *testing.T, tr *tree, what string) string {
	t.Helper()
	name := fmt.Sprintf("microlet-test/conformance-%s:%d", what, time.Now().UnixNano())
	var log bytes.Buffer
	if err := importImage(ctx, tr, []string{name}, &log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", name).Run() })
	return name
}

// TestNonRootAndGlibcImages builds the nonroot and glibc-dns-testing
// images as imageTrees does, imports them into Docker and runs in them
// what the NodeConformance specs run: `id -u` in nonroot prints the
// image's own user 1234 (runAsNonRoot "should run with an image specified
// user ID"), and the hostnameOverride specs' `echo $(hostname)';'$(hostname
// -f)';'` in glibc-dns-testing prints the name and the canonical name glibc
// finds for it in the pod's /etc/hosts (the kubelet's file, bind-mounted
// here as the runtime does).
func TestNonRootAndGlibcImages(t *testing.T) {
	if testing.Short() {
		t.Skip("imports images into Docker")
	}
	for _, f := range []string{"/bin/busybox", hostShell, hostHostname} {
		if _, err := os.Stat(f); err != nil {
			testenv.RequireOrSkip(t, "%v (apt-get install busybox-static bash-static hostname)", err)
		}
	}
	if err := exec.Command("docker", "version").Run(); err != nil {
		testenv.RequireOrSkip(t, "docker not reachable: %v", err)
	}
	bins := testenv.Build(t, nil, BusyboxShPackage)
	src := ImageSources{Busybox: "/bin/busybox", Shell: hostShell, ShellSwitch: filepath.Join(bins, "busybox-sh"),
		Agnhost: "/bin/busybox", Pause: "/bin/busybox", Nonewprivs: "/bin/busybox", GlibcPrograms: []string{hostHostname},
		KittenFiles: map[string]string{"kitten.jpg": "/etc/hostname", "data.json": "/etc/hostname"}}
	trees, err := imageTrees(src)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*tree{}
	for _, nt := range trees {
		for _, n := range nt.names {
			byName[n] = nt.tree
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	nonroot := importForTest(ctx, t, byName[NonRootImage], "nonroot")
	if out, code := dockerRun(ctx, t, nonroot, nil, "id", "-u"); out != "1234\n" || code != 0 {
		t.Errorf("nonroot: id -u: %q exit %d, want the image's user 1234", out, code)
	}
	// The kubelet refuses runAsNonRoot for an image whose user is root or
	// not numeric; this one is numeric and not root.
	if out, code := dockerRun(ctx, t, nonroot, []string{"--entrypoint", ""}, "sh", "-c", "echo ok"); out != "ok\n" || code != 0 {
		t.Errorf("nonroot: sh: %q exit %d", out, code)
	}

	glibc := importForTest(ctx, t, byName[GlibcDNSTestingImage], "glibc-dns-testing")
	const script = "echo $(hostname)';'$(hostname -f)';'"
	for _, tc := range []struct {
		name, hostname, hosts, want string
	}{
		// What the kubelet writes for hostnameOverride: the name alone.
		{"hostnameOverride", "override-host", "10.1.2.3\toverride-host\n", "override-host;override-host;\n"},
		// A pod with a subdomain: the FQDN first, so -f prints it.
		{"subdomain", "web-0", "10.1.2.3\tweb-0.sub.ns.svc.cluster.local\tweb-0\n", "web-0;web-0.sub.ns.svc.cluster.local;\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hosts := filepath.Join(t.TempDir(), "hosts")
			if err := os.WriteFile(hosts, []byte("127.0.0.1\tlocalhost\n"+tc.hosts), 0o644); err != nil {
				t.Fatal(err)
			}
			flags := []string{"--network", "none", "--hostname", tc.hostname, "-v", hosts + ":/etc/hosts:ro"}
			if out, code := dockerRun(ctx, t, glibc, flags, "sh", "-c", script); out != tc.want || code != 0 {
				t.Errorf("%s: %q exit %d, want %q", script, out, code, tc.want)
			}
		})
	}
	// The image's default command is bash, as Debian's.
	if out, code := dockerRun(ctx, t, glibc, nil, "bash", "-c", "echo $BASH_VERSION | cut -c1"); code != 0 || out == "" {
		t.Errorf("bash: %q exit %d", out, code)
	}
}

func TestOCIImage(t *testing.T) {
	tr := newTree()
	tr.text("data.json", `{"kitten.jpg": 1}`, 0o644)
	tr.changes = []string{envPath, `ENTRYPOINT ["/agnhost"]`, `CMD ["test-webserver", "--port=80"]`, "EXPOSE 80", "USER 65535:65535"}
	img, err := tr.ociImage()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/agnhost"}) || !slices.Equal(c.Cmd, []string{"test-webserver", "--port=80"}) ||
		!slices.Equal(c.Env, []string{strings.TrimPrefix(envPath, "ENV ")}) || c.User != "65535:65535" || len(c.ExposedPorts) != 1 {
		t.Errorf("config %+v", c)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v %v", layers, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	h, err := tar.NewReader(rc).Next()
	if err != nil || h.Name != "data.json" {
		t.Errorf("first entry %+v %v", h, err)
	}
	tr.changes = append(tr.changes, "VOLUME /data")
	if _, err := tr.ociImage(); err == nil {
		t.Error("an unsupported change was accepted")
	}
}
