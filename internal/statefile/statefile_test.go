package statefile

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
)

func TestWriteFileReplacesAndKeepsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	for _, body := range []string{"first", "second, longer"} {
		if err := WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != body {
			t.Fatalf("read %q, %v; want %q", got, err, body)
		}
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("dir holds %d entries, want only the target", len(ents))
	}
}

func TestWriteFileMissingDirNamesPath(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent", "state.json")
	err := WriteFile(p, []byte("x"), 0o600)
	if err == nil || !strings.Contains(err.Error(), p) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err %v, want one naming %s and wrapping ErrNotExist", err, p)
	}
}

func TestSweepRemovesOnlyItsTempFiles(t *testing.T) {
	dir := t.TempDir()
	keep := []string{"state.json", ".hidden", "state.json.tmp", "a.corrupt-20260101T000000.000000000Z"}
	stale := []string{".state.json" + tempMarker + "123", ".other" + tempMarker + "x"}
	for _, n := range append(append([]string{}, keep...), stale...) {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := Sweep(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != len(stale) {
		t.Fatalf("removed %v, want %v", removed, stale)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != len(keep) {
		t.Fatalf("%d entries left, want %d (%v)", len(ents), len(keep), keep)
	}
	if r, err := Sweep(filepath.Join(dir, "absent")); err != nil || r != nil {
		t.Fatalf("sweep of a missing dir: %v, %v", r, err)
	}
}

func TestQuarantineMovesAsideAndWarns(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "record.json")
	if err := os.WriteFile(p, []byte("{garbled"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	now := time.Date(2026, 11, 28, 8, 0, 0, 5, time.UTC)
	aside, err := quarantineAt(log, p, errors.New("unexpected end of JSON input"), now)
	if err != nil {
		t.Fatal(err)
	}
	if want := p + ".corrupt-20261128T080000.000000005Z"; aside != want {
		t.Fatalf("moved to %s, want %s", aside, want)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("original still there: %v", err)
	}
	if b, _ := os.ReadFile(aside); string(b) != "{garbled" {
		t.Fatalf("quarantined content %q", b)
	}
	line := logBuf.String()
	for _, want := range []string{"level=WARN", p, aside, "unexpected end of JSON input"} {
		if !strings.Contains(line, want) {
			t.Fatalf("log %q lacks %q", line, want)
		}
	}
	if !IsQuarantined(filepath.Base(aside)) || IsQuarantined("record.json") {
		t.Fatal("IsQuarantined does not recognise the name")
	}
}

// TestWriteFileENOSPC fills a small tmpfs: the write fails with ENOSPC
// naming the file, the old content survives, no temporary file is left,
// and once space is freed the same write succeeds.
func TestWriteFileENOSPC(t *testing.T) {
	testenv.RequireRoot(t, "mounts a small tmpfs")
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "microlet-statefile-test", dir).CombinedOutput(); err != nil {
		testenv.RequireOrSkip(t, "mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })

	p := filepath.Join(dir, "state.json")
	if err := WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	_ = f.Close()

	err = WriteFile(p, bytes.Repeat([]byte("n"), 8192), 0o600)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), p) {
		t.Fatalf("err %v, want ENOSPC naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("after ENOSPC the file holds %q, want the old content", b)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if IsTemp(e.Name()) {
			t.Fatalf("temporary file %s left after ENOSPC", e.Name())
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o600); err != nil {
		t.Fatalf("after freeing space: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Fatalf("file holds %q, want new", b)
	}
}

// QuarantineReplace keeps the corrupt bytes aside and leaves the
// replacement in place, never a missing file, and says so once.
func TestQuarantineReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec")
	if err := os.WriteFile(path, []byte("{garbled"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	aside, err := QuarantineReplace(slog.New(slog.NewTextHandler(&logs, nil)), path, errors.New("bad json"), []byte("{}"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(aside); string(b) != "{garbled" {
		t.Errorf("aside holds %q", b)
	}
	if b, _ := os.ReadFile(path); string(b) != "{}" {
		t.Errorf("path holds %q, want the replacement", b)
	}
	if !IsQuarantined(filepath.Base(aside)) {
		t.Errorf("%s not recognised as quarantined", aside)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), aside) {
		t.Errorf("want one Warning naming %s: %s", aside, logs.String())
	}
}
