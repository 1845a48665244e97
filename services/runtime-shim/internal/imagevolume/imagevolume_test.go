package imagevolume

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func tarOf(t *testing.T, entries ...tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "content of " + h.Name
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if body != "" {
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func TestUnpack(t *testing.T) {
	dir := t.TempDir()
	err := Unpack(tarOf(t,
		tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644},
		tar.Header{Name: "bin/tool", Typeflag: tar.TypeReg, Mode: 0o4755},
		tar.Header{Name: "etc/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/os-release"},
		tar.Header{Name: "etc/hard", Typeflag: tar.TypeLink, Linkname: "etc/os-release"},
		tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
	), dir)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc/os-release")); err != nil || string(b) != "content of etc/os-release" {
		t.Errorf("etc/os-release: %q %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin/tool")); err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("bin/tool mode: %v %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "etc/link")); err != nil || l != "/etc/os-release" {
		t.Errorf("etc/link: %q %v", l, err)
	}
	a, _ := os.Stat(filepath.Join(dir, "etc/os-release"))
	h, _ := os.Stat(filepath.Join(dir, "etc/hard"))
	if a == nil || h == nil || !os.SameFile(a, h) {
		t.Error("etc/hard is not a hard link of etc/os-release")
	}
	if _, err := os.Lstat(filepath.Join(dir, "dev/null")); !os.IsNotExist(err) {
		t.Errorf("device node unpacked: %v", err)
	}
}

func TestUnpackRefusesEscapes(t *testing.T) {
	for name, entries := range map[string][]tar.Header{
		"dot-dot name":  {{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}},
		"hard link out": {{Name: "x", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
		"through a symlink": {
			{Name: "d", Typeflag: tar.TypeSymlink, Linkname: "/tmp"},
			{Name: "d/evil", Typeflag: tar.TypeReg, Mode: 0o644},
		},
	} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "root")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := Unpack(tarOf(t, entries...), dir); err == nil {
				t.Fatal("unpacked")
			}
			if _, err := os.Stat(filepath.Join(parent, "evil")); err == nil {
				t.Error("a file was written outside the root")
			}
		})
	}
}
