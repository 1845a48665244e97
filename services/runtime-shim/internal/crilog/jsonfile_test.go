package crilog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dockerLine is a line as Docker's json-file driver writes it.
func dockerLine(t testing.TB, log, stream string, ts time.Time) []byte {
	t.Helper()
	b, err := json.Marshal(struct {
		Log    string `json:"log"`
		Stream string `json:"stream"`
		Time   string `json:"time"`
	}{log, stream, ts.UTC().Format(time.RFC3339Nano)})
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestParseJSONLine(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	for _, tc := range []struct{ name, log string }{
		{"plain", "hello world\n"},
		{"partial", "no newline"},
		{"escapes", "tab\there \"q\" back\\slash <&> \x01\n"},
		{"unicode", "héllo ☃ 𝄞\n"},
		{"invalid utf8", "bad \xff byte\n"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := bytes.TrimSuffix(dockerLine(t, tc.log, Stderr, ts), []byte("\n"))
			e, _, err := parseJSONLine(line, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.ToValidUTF8(tc.log, "\uFFFD")
			if string(e.log) != want || e.stream != Stderr || !e.time.Equal(ts) {
				t.Fatalf("got %q %s %v", e.log, e.stream, e.time)
			}
		})
	}
	attrs := []byte(`{"log":"a\n","stream":"stdout","attrs":{"time":"x"},"time":"2026-01-02T03:04:05.0000006Z"}`)
	if e, _, err := parseJSONLine(attrs, nil); err != nil || string(e.log) != "a\n" || !e.time.Equal(ts) {
		t.Fatalf("with attrs: %q %v %v", e.log, e.time, err)
	}
}

// FuzzParseJSONLine checks the hand parser against encoding/json.
func FuzzParseJSONLine(f *testing.F) {
	f.Add([]byte(`{"log":"a\n","stream":"stdout","time":"2026-01-02T03:04:05.0000006Z"}`))
	f.Add([]byte(`{"log":"\u00e9\ud834\udd1e\"","stream":"stderr","time":"2026-01-02T03:04:05Z"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		e, _, err := parseJSONLine(line, nil)
		if err != nil {
			return
		}
		var j struct {
			Log    string    `json:"log"`
			Stream string    `json:"stream"`
			Time   time.Time `json:"time"`
		}
		if json.Unmarshal(line, &j) != nil {
			return // the hand parser is lenient about what follows the log string
		}
		if string(e.log) != j.Log {
			t.Fatalf("log %q, encoding/json %q", e.log, j.Log)
		}
	})
}

// TestCopierRotationAndResume plays Docker's rename rotation and a copier
// stopped at arbitrary points: the CRI file holds every line once, in order.
func TestCopierRotationAndResume(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "c-json.log")
	cri := filepath.Join(dir, "cri", "0.log")
	pos := filepath.Join(dir, "pos")
	const maxFiles, perFile, total = 3, 7, 200
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	w, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	rotate := func() {
		_ = w.Close()
		_ = os.Remove(fmt.Sprintf("%s.%d", src, maxFiles-1))
		for i := maxFiles - 2; i >= 1; i-- {
			_ = os.Rename(fmt.Sprintf("%s.%d", src, i), fmt.Sprintf("%s.%d", src, i+1))
		}
		if err := os.Rename(src, src+".1"); err != nil {
			t.Fatal(err)
		}
		if w, err = os.Create(src); err != nil {
			t.Fatal(err)
		}
	}
	var c *Copier
	var file *File
	rotated := 0
	start := func() {
		if file, err = Open(cri); err != nil {
			t.Fatal(err)
		}
		if c, err = NewCopier(file, src, pos, nil); err != nil {
			t.Fatal(err)
		}
	}
	stop := func() { _ = c.Close(); _ = file.Close() }
	drain := func() {
		for {
			ok, err := c.step()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return
			}
		}
	}
	start()
	for i := range total {
		stream := Stdout
		if i%3 == 0 {
			stream = Stderr
		}
		if _, err := w.Write(dockerLine(t, strconv.Itoa(i)+"\n", stream, ts.Add(time.Duration(i)))); err != nil {
			t.Fatal(err)
		}
		if i%perFile == perFile-1 {
			rotate()
		}
		switch {
		case i%11 == 0:
			drain()
		case i%37 == 0:
			// A crash after the CRI write, before the record.
			drain()
			p, _ := ReadPosition(pos)
			stop()
			f, _ := os.OpenFile(cri, os.O_WRONLY|os.O_APPEND, 0)
			_, _ = f.WriteString(ts.Format(time.RFC3339Nano) + " stdout F garbage\n")
			_ = f.Close()
			_ = os.WriteFile(pos, p.encode(), 0o600)
			start()
		case i%53 == 0:
			drain()
			rotated++
			if err := os.Rename(cri, fmt.Sprintf("%s.%03d", cri, rotated)); err != nil {
				t.Fatal(err)
			}
			if err := c.Reopen(); err != nil {
				t.Fatal(err)
			}
		}
	}
	drain()
	stop()
	if c.Lost() {
		t.Fatal("copier reports lost lines")
	}
	var got []string
	names, _ := filepath.Glob(cri + ".*")
	if len(names) != rotated {
		t.Fatalf("rotated CRI files %q, want %d", names, rotated)
	}
	for _, name := range append(names, cri) {
		b, _ := os.ReadFile(name)
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if l == "" {
				continue
			}
			_, _, tag, content, err := ParseLine([]byte(l))
			if err != nil || tag != TagFull {
				t.Fatalf("line %q: %v", l, err)
			}
			got = append(got, string(content))
		}
	}
	if len(got) != total {
		t.Fatalf("%d lines, want %d: %q", len(got), total, got)
	}
	for i, l := range got {
		if l != strconv.Itoa(i) {
			t.Fatalf("line %d is %q", i, l)
		}
	}
}

// BenchmarkCopier copies a Docker json-file log of 100-byte lines into a CRI
// file and reports the MB/s of container output copied.
func BenchmarkCopier(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "c-json.log")
	var buf bytes.Buffer
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pad := strings.Repeat("x", 90)
	var out int64
	for i := range 200000 {
		line := fmt.Sprintf("%08d %s\n", i, pad)
		out += int64(len(line))
		buf.Write(dockerLine(b, line, Stdout, ts.Add(time.Duration(i))))
	}
	if err := os.WriteFile(src, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(out)
	b.ResetTimer()
	for i := range b.N {
		cri := filepath.Join(dir, fmt.Sprintf("cri%d.log", i))
		file, err := Open(cri)
		if err != nil {
			b.Fatal(err)
		}
		c, err := NewCopier(file, src, cri+".pos", nil)
		if err != nil {
			b.Fatal(err)
		}
		for {
			ok, err := c.step()
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				break
			}
		}
		_ = c.Close()
		_ = file.Close()
		_ = os.Remove(cri)
	}
}

// TestCopierLongLine: a line several times the read buffer arrives whole
// in the CRI file, also when it reaches the copier in pieces, and the grown
// buffer goes back to its small size once the line is copied.
func TestCopierLongLine(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "c-json.log")
	file, err := Open(filepath.Join(dir, "cri", "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = file.Close() }()
	w, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Close() }()
	c, err := NewCopier(file, src, filepath.Join(dir, "pos"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	drain := func() {
		t.Helper()
		for {
			ok, err := c.step()
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return
			}
		}
	}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	long := strings.Repeat("0123456789abcdef", 5*copyBufSize/16) // 5 buffers
	line := dockerLine(t, long+"\n", Stdout, ts)
	// Half the line, a copy attempt, then the rest and a short line.
	if _, err := w.Write(line[:len(line)/2]); err != nil {
		t.Fatal(err)
	}
	drain()
	if _, err := w.Write(append(line[len(line)/2:], dockerLine(t, "short\n", Stdout, ts.Add(time.Second))...)); err != nil {
		t.Fatal(err)
	}
	drain()
	if cap(c.buf) > copyBufSize {
		t.Errorf("buffer holds %d bytes after the long line, want at most %d", cap(c.buf), copyBufSize)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cri", "0.log"))
	if err != nil {
		t.Fatal(err)
	}
	// The CRI file splits long lines itself: partial pieces, then a full one.
	var got []string
	var cur strings.Builder
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		_, _, tag, content, err := ParseLine([]byte(l))
		if err != nil {
			t.Fatalf("line of %d bytes: %v", len(l), err)
		}
		cur.Write(content)
		if tag == TagFull {
			got = append(got, cur.String())
			cur.Reset()
		}
	}
	if len(got) != 2 || got[0] != long || got[1] != "short" {
		t.Fatalf("CRI file has %d lines (first %d bytes), want the long line then \"short\"", len(got), len(got[0]))
	}
}
