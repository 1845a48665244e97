package crilog

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

func TestDockerWriterResumeAndReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c", "0.log")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	w := NewDockerWriter(f, Stdout, time.Time{})
	_, _ = w.Write([]byte(t0.Format(time.RFC3339Nano) + " hello\n" + t0.Add(time.Second).Format(time.RFC3339Nano) + " wor"))
	_, _ = w.Write([]byte("ld\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " stdout F hello") || !strings.HasSuffix(lines[1], " stdout F world") {
		t.Fatalf("lines = %q", lines)
	}

	// A restarted follower replays from the last second; lines already in
	// the file are skipped.
	f, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.LastTimestamp(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("LastTimestamp = %v", got)
	}
	w = NewDockerWriter(f, Stderr, f.LastTimestamp())
	_, _ = w.Write([]byte(t0.Add(time.Second).Format(time.RFC3339Nano) + " world\n" + t0.Add(2*time.Second).Format(time.RFC3339Nano) + " new\n"))
	_ = w.Close()
	lines = readLines(t, path)
	if len(lines) != 3 || !strings.HasSuffix(lines[2], " stderr F new") {
		t.Fatalf("after resume lines = %q", lines)
	}

	// Rotation: move the file away and reopen.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := f.Reopen(); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteLine(t0.Add(3*time.Second), Stdout, []byte(strings.Repeat("x", MaxLine+1)), false); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	lines = readLines(t, path)
	if len(lines) != 2 {
		t.Fatalf("rotated file has %d lines", len(lines))
	}
	for i, want := range []string{TagPartial, TagFull} {
		_, stream, tag, _, err := ParseLine([]byte(lines[i]))
		if err != nil || stream != Stdout || tag != want {
			t.Fatalf("line %d: %s %s %v", i, stream, tag, err)
		}
	}
}

func TestOpenRejectsRelative(t *testing.T) {
	if _, err := Open("rel/0.log"); err == nil {
		t.Fatal("relative path accepted")
	}
}

func FuzzParseLine(f *testing.F) {
	f.Add([]byte("2016-10-06T00:17:09.669794202Z stdout F hi"))
	f.Add([]byte("x y"))
	f.Fuzz(func(t *testing.T, b []byte) { _, _, _, _, _ = ParseLine(b) })
}
