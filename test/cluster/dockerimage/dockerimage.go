package dockerimage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// LabelContent is set on every image to the hash of its file system and
// configuration; an image whose label matches is not imported again.
const LabelContent = "io.microlet.addons.content"

// EnvPath is the usual search path, as a docker import change.
const EnvPath = "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// File is an in-memory file of an image, or a symbolic link.
type File struct {
	// Body is the file's content.
	Body []byte
	// Mode is its permission bits (0644 when zero).
	Mode int64
	// Link, when set, makes the entry a symbolic link to Link instead.
	Link string
}

// Spec is one image.
type Spec struct {
	// Name is the image reference to tag, e.g. registry.k8s.io/pause:3.10.1.
	Name string
	// Base is an optional directory tree copied first (a ".complete"
	// marker at its top, as the build caches leave, is skipped).
	Base string
	// Files are host files (path in the image -> path on the host),
	// written with mode 0755 over the base.
	Files map[string]string
	// Data are in-memory files (path in the image -> content) over the
	// base.
	Data map[string]File
	// Changes are docker import --change lines (ENTRYPOINT, ENV, ...).
	Changes []string
}

// Import writes s's tar to a temporary file and docker-imports it, unless
// an image named s.Name already carries the same content label. It reports
// whether it imported.
func Import(ctx context.Context, s Spec, log io.Writer) (bool, error) {
	f, err := os.CreateTemp("", "dockerimage-*.tar")
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	if err := WriteTar(io.MultiWriter(f, h), s); err != nil {
		return false, fmt.Errorf("image %s: %w", s.Name, err)
	}
	for _, c := range s.Changes {
		fmt.Fprintf(h, "\x00%s", c)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	if Label(ctx, s.Name, LabelContent) == sum {
		fmt.Fprintf(log, "image %s: up to date\n", s.Name)
		return false, nil
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return false, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	args := []string{"import"}
	for _, c := range append(s.Changes, "LABEL "+LabelContent+"="+sum) {
		args = append(args, "--change", c)
	}
	args = append(args, "-", s.Name)
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdin = f
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("docker import %s: %w: %s", s.Name, err, bytes.TrimSpace(out))
	}
	fmt.Fprintf(log, "image %s: imported (content %s, %d MiB)\n", s.Name, sum, size>>20)
	return true, nil
}

// Label is the value of the image's label, empty when the image or the
// label does not exist.
func Label(ctx context.Context, image, label string) string {
	got, _ := exec.CommandContext(ctx, "docker", "image", "inspect", "-f", fmt.Sprintf("{{index .Config.Labels %q}}", label), image).Output()
	v := strings.TrimSpace(string(got))
	if v == "<no value>" {
		return ""
	}
	return v
}

// WriteTar writes s's file system: the base tree, then the files and data,
// owned by root, with fixed times, in a stable order, so equal content
// hashes equally. The usual mount points (tmp, etc, proc, sys, dev, run,
// var) always exist.
func WriteTar(w io.Writer, s Spec) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	addDirs := func(p string) error {
		var parents []string
		for d := filepath.Dir(p); d != "." && d != "/" && !dirs[d]; d = filepath.Dir(d) {
			parents = append(parents, d)
		}
		for i := len(parents) - 1; i >= 0; i-- {
			dirs[parents[i]] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: parents[i] + "/", Mode: 0o755, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		return nil
	}
	if s.Base != "" {
		if err := writeBase(tw, s, dirs); err != nil {
			return fmt.Errorf("base %s: %w", s.Base, err)
		}
	}
	paths := make([]string, 0, len(s.Files)+len(s.Data))
	for p := range s.Files {
		paths = append(paths, p)
	}
	for p := range s.Data {
		if _, dup := s.Files[p]; dup {
			return fmt.Errorf("%s is both a host file and data", p)
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := addDirs(p); err != nil {
			return err
		}
		if d, ok := s.Data[p]; ok {
			mode := d.Mode
			if mode == 0 {
				mode = 0o644
			}
			hdr := &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(d.Body))}
			if d.Link != "" {
				hdr = &tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: d.Link, Mode: 0o777}
			}
			normalize(hdr)
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := tw.Write(d.Body); err != nil {
				return err
			}
			continue
		}
		info, err := os.Stat(s.Files[p])
		if err != nil {
			return err
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: 0o755, Size: info.Size()}
		normalize(hdr)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if err := copyFile(tw, s.Files[p]); err != nil {
			return err
		}
	}
	for _, d := range []string{"tmp", "etc", "proc", "sys", "dev", "run", "var"} {
		if dirs[d] {
			continue
		}
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeBase copies s.Base, leaving out what s.Files or s.Data replace.
func writeBase(tw *tar.Writer, s Spec, dirs map[string]bool) error {
	return filepath.WalkDir(s.Base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.Base, p)
		if rel == "." || rel == ".complete" || rel == ".lock" {
			return nil
		}
		if _, over := s.Files[rel]; over {
			return nil
		}
		if _, over := s.Data[rel]; over {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if d.IsDir() {
			hdr.Name += "/"
			dirs[rel] = true
		}
		normalize(hdr)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			return copyFile(tw, p)
		}
		return nil
	})
}

func normalize(h *tar.Header) {
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
	h.ModTime, h.AccessTime, h.ChangeTime = time0, time0, time0
	h.Format = tar.FormatPAX
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

var time0 = time.Unix(0, 0)
