package docker

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
	"runtime"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// pausePackage is the Go package of our pause program, built when no binary is at hand.
const pausePackage = "github.com/microlet/microlet/services/runtime-shim/pause"

// ensurePauseImage imports the pause image into Docker when it is missing:
// a FROM-scratch image holding only our static pause binary. No image can
// be pulled on an offline node, so the shim brings its own.
func (b *Backend) ensurePauseImage(ctx context.Context) error {
	b.pause.Lock()
	defer b.pause.Unlock()
	if _, err := b.cli.ImageInspect(ctx, b.opts.PauseImage); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("inspect pause image: %w", err)
	}
	bin, cleanup, err := b.pauseBinary(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	data, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("read pause binary: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	res, err := b.cli.ImageImport(ctx, client.ImageImportSource{Source: &buf, SourceName: "-"}, b.opts.PauseImage, client.ImageImportOptions{
		Changes: []string{`ENTRYPOINT ["/pause"]`, `LABEL ` + LabelInstance + `=shared`},
	})
	if err != nil {
		return fmt.Errorf("import pause image: %w", err)
	}
	out, err := io.ReadAll(res)
	_ = res.Close()
	if err != nil {
		return fmt.Errorf("import pause image: %w", err)
	}
	if bytes.Contains(out, []byte(`"errorDetail"`)) {
		return fmt.Errorf("import pause image: %s", bytes.TrimSpace(out))
	}
	b.log.Info("imported pause image", "image", b.opts.PauseImage, "from", bin)
	return nil
}

// pauseBinary finds a static pause program: the configured one, one named
// "pause" next to our executable (make build puts it there), or one built
// from source with the Go toolchain.
func (b *Backend) pauseBinary(ctx context.Context) (string, func(), error) {
	nop := func() {}
	if b.opts.PauseBinary != "" {
		return b.opts.PauseBinary, nop, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "pause")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nop, nil
		}
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", nop, errors.New("pause image missing and no pause binary: set pause_binary or install the Go toolchain")
	}
	dir, err := os.MkdirTemp("", "microlet-pause-")
	if err != nil {
		return "", nop, err
	}
	out := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, pausePackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if src := sourceDir(); src != "" {
		cmd.Dir = src
	}
	if msg, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nop, fmt.Errorf("build pause program: %v: %s", err, msg)
	}
	return out, func() { _ = os.RemoveAll(dir) }, nil
}

// sourceDir is this repository's root when the shim runs from a checkout
// (tests), so `go build` resolves the pause package.
func sourceDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return ""
	}
	return dir
}
