package conformance

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
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
