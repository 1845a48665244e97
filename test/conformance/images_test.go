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
	"slices"
	"strings"
	"testing"
	"time"
)

func TestBusyboxTree(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		if os.Getenv("MICROLET_REQUIRE_CONTROLPLANE") == "1" {
			t.Fatalf("/bin/busybox: %v (apt-get install busybox-static)", err)
		}
		t.Skip("no /bin/busybox (apt-get install busybox-static)")
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
		t.Skipf("no %s", hostCurl)
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

// TestBusyboxImageShell imports the busybox image with Debian's bash-static
// as sh under a test name and runs in it, through Docker, what the
// ConfigMap and Secret envFrom specs run (`sh -c env` with variables whose
// names are not shell identifiers), and a few other `sh -c` forms the suite
// uses on busybox.
func TestBusyboxImageShell(t *testing.T) {
	if testing.Short() {
		t.Skip("imports an image into Docker")
	}
	for _, f := range []string{"/bin/busybox", hostShell} {
		if _, err := os.Stat(f); err != nil {
			if os.Getenv("MICROLET_REQUIRE_CONTROLPLANE") == "1" {
				t.Fatalf("%s: %v (apt-get install busybox-static bash-static)", f, err)
			}
			t.Skipf("no %s (apt-get install busybox-static bash-static)", f)
		}
	}
	if err := exec.Command("docker", "version").Run(); err != nil {
		if os.Getenv("MICROLET_REQUIRE_CONTROLPLANE") == "1" {
			t.Fatalf("docker: %v", err)
		}
		t.Skipf("docker not reachable: %v", err)
	}
	bb, err := busyboxTree("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	img, err := busyboxImage(bb, hostShell)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("microlet-test/conformance-busybox:%d", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	if err := importImage(ctx, img, []string{name}, &log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", name).Run() })

	run := func(env []string, cmd ...string) (string, int) {
		t.Helper()
		args := []string{"run", "--rm", "--label", "io.microlet.test=conformance-images"}
		for _, e := range env {
			args = append(args, "-e", e)
		}
		args = append(append(args, name), cmd...)
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

	// The names the envFrom specs give: the ConfigMap's keys with the
	// prefixes "", "p-", "1-", "$_-", "ABC_" and "#@!".
	var env, want []string
	for _, prefix := range []string{"", "p-", "1-", "$_-", "ABC_", "#@!"} {
		kv := prefix + "data-1=value-1"
		env, want = append(env, kv), append(want, kv)
	}
	out, code := run(env, "sh", "-c", "env")
	if code != 0 {
		t.Fatalf("sh -c env: exit %d: %s", code, out)
	}
	lines := strings.Split(out, "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("sh -c env lacks %q:\n%s", w, out)
		}
	}

	// The shell is still a POSIX sh running busybox's applets: exit
	// statuses, variables, tests, pipes, traps.
	for _, c := range []struct {
		script, want string
		code         int
	}{
		{"echo $HOME; exit 3", "/root\n", 3},
		{"[ -d /tmp ] && ls / | grep -c '^bin$'", "1\n", 0},
		{"trap 'echo bye' EXIT; cat /etc/hostname >/dev/null; echo hi", "hi\nbye\n", 0},
		{"readlink /bin/env; busybox --help >/dev/null && echo applets", "busybox\napplets\n", 0},
	} {
		if out, code := run(nil, "/bin/sh", "-c", c.script); out != c.want || code != c.code {
			t.Errorf("sh -c %q: %q exit %d, want %q exit %d", c.script, out, code, c.want, c.code)
		}
	}
}
