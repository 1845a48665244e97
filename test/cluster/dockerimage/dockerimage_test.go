package dockerimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWriteTarIsStableAndComplete builds an image tree from a base
// directory (a file, a symlink, a nested directory) plus an added binary
// and an in-memory file
// twice: the bytes are equal (so the content label only changes with the
// content), the added file overrides the base's and the usual mount
// points exist.
func TestWriteTarIsStableAndComplete(t *testing.T) {
	base := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(base, "usr/sbin"), 0o755))
	must(os.WriteFile(filepath.Join(base, "usr/sbin/xtables-nft-multi"), []byte("multi"), 0o755))
	must(os.Symlink("xtables-nft-multi", filepath.Join(base, "usr/sbin/iptables")))
	must(os.WriteFile(filepath.Join(base, "podnet"), []byte("old"), 0o755))
	must(os.WriteFile(filepath.Join(base, ".complete"), []byte("marker"), 0o644))
	bin := filepath.Join(t.TempDir(), "podnet")
	must(os.WriteFile(bin, []byte("new podnet"), 0o755))
	spec := Spec{Name: "x", Base: base, Files: map[string]string{"podnet": bin, "usr/local/bin/tool": bin}, Data: map[string]File{"etc/conf": {Body: []byte("c")}}}

	var a, b bytes.Buffer
	must(WriteTar(&a, spec))
	must(os.Chtimes(bin, time0.Add(1e9), time0.Add(1e9))) // times do not count
	must(WriteTar(&b, spec))
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two tars of the same content differ")
	}

	entries := map[string]*tar.Header{}
	contents := map[string]string{}
	tr := tar.NewReader(&a)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		if _, dup := entries[h.Name]; dup {
			t.Errorf("%s twice in the tar", h.Name)
		}
		entries[h.Name] = h
		data, _ := io.ReadAll(tr)
		contents[h.Name] = string(data)
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(time0) {
			t.Errorf("%s: uid %d gid %d mtime %v, want root and time 0", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if contents["podnet"] != "new podnet" {
		t.Errorf("podnet = %q, want the added file over the base's", contents["podnet"])
	}
	if h := entries["etc/conf"]; h == nil || contents["etc/conf"] != "c" || h.Mode != 0o644 {
		t.Errorf("in-memory file etc/conf: %+v %q, want mode 0644 and content c", h, contents["etc/conf"])
	}
	if h := entries["usr/sbin/iptables"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "xtables-nft-multi" {
		t.Errorf("iptables link: %+v", h)
	}
	var names []string
	for n := range entries {
		names = append(names, n)
	}
	for _, want := range []string{"usr/local/", "usr/local/bin/", "usr/local/bin/tool", "tmp/", "proc/", "sys/", "dev/", "etc/"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s in %v", want, names)
		}
	}
	for _, n := range names {
		if strings.Contains(n, ".complete") {
			t.Errorf("the cache marker %s is in the image", n)
		}
	}
}
