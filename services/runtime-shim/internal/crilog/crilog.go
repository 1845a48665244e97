package crilog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Stream names as they appear in a CRI log line.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// Tags of a CRI log line: a full line or a partial one continued by the next.
const (
	TagFull    = "F"
	TagPartial = "P"
)

// MaxLine is the longest content written as one CRI line; longer lines are
// split into partial lines, as the kubelet's readers expect.
const MaxLine = 16 * 1024

// File is a CRI log file that can be reopened after the caller rotated it.
type File struct {
	mu   sync.Mutex
	path string
	f    *os.File
	w    *bufio.Writer
	last time.Time
	ino  uint64 // inode of f, to tell a rotated file from the one we wrote
	size int64  // bytes in f, flushed or buffered
}

// Open opens (appending) or creates the log file at path, with its directory.
// It reads the last line's timestamp so LastTimestamp can drive a resume.
func Open(path string) (*File, error) {
	if path == "" || !filepath.IsAbs(path) {
		return nil, fmt.Errorf("crilog: log path %q must be absolute", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("crilog: %w", err)
	}
	last, _ := lastTimestamp(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("crilog: %w", err)
	}
	l := &File{path: path, f: f, w: bufio.NewWriterSize(f, 64*1024), last: last}
	if err := l.stat(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return l, nil
}

func (l *File) stat() error {
	st, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("crilog: %w", err)
	}
	l.size = st.Size()
	l.ino = inode(st)
	return nil
}

// State is the inode and size of the file as written so far (buffered
// lines included): a copier records it with its position in the source so a
// restart can cut what was written after the record.
func (l *File) State() (ino uint64, size int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ino, l.size
}

// Truncate cuts the file to size (lines written after a recorded position,
// about to be copied again). It is a no-op when the file is already shorter.
func (l *File) Truncate(size int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("crilog: file closed")
	}
	if err := l.w.Flush(); err != nil {
		return fmt.Errorf("crilog: %w", err)
	}
	if size >= l.size {
		return nil
	}
	if err := l.f.Truncate(size); err != nil {
		return fmt.Errorf("crilog: %w", err)
	}
	l.size = size
	return nil
}

// Path is the file's path.
func (l *File) Path() string { return l.path }

// LastTimestamp is the timestamp of the newest line in the file (zero when empty).
func (l *File) LastTimestamp() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// WriteLine writes one log line (without its newline), splitting content over
// MaxLine into partial lines. partial marks content that did not end in a newline.
func (l *File) WriteLine(ts time.Time, stream string, content []byte, partial bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("crilog: file closed")
	}
	l.appendLine(ts, stream, content, partial)
	return l.w.Flush()
}

// Append is WriteLine without the flush: the line may sit in the buffer
// until Flush, so a copier writes a batch with few system calls.
func (l *File) Append(ts time.Time, stream string, content []byte, partial bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("crilog: file closed")
	}
	l.appendLine(ts, stream, content, partial)
	return nil
}

// Flush writes the buffered lines to the file.
func (l *File) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("crilog: file closed")
	}
	return l.w.Flush()
}

func (l *File) appendLine(ts time.Time, stream string, content []byte, partial bool) {
	var tsb [len(time.RFC3339Nano) + 8]byte
	stamp := ts.UTC().AppendFormat(tsb[:0], time.RFC3339Nano)
	for {
		chunk, rest := content, []byte(nil)
		tag := TagFull
		if len(chunk) > MaxLine {
			chunk, rest = content[:MaxLine], content[MaxLine:]
			tag = TagPartial
		} else if partial {
			tag = TagPartial
		}
		// bufio.Writer keeps the first error; Flush reports it.
		_, _ = l.w.Write(stamp)
		_ = l.w.WriteByte(' ')
		_, _ = l.w.WriteString(stream)
		_ = l.w.WriteByte(' ')
		_, _ = l.w.WriteString(tag)
		_ = l.w.WriteByte(' ')
		_, _ = l.w.Write(chunk)
		_ = l.w.WriteByte('\n')
		l.size += int64(len(stamp) + len(stream) + len(tag) + len(chunk) + 4)
		if rest == nil {
			break
		}
		content = rest
	}
	if ts.After(l.last) {
		l.last = ts
	}
}

// Reopen closes the file and opens path again, creating it when the caller
// moved the old one away (log rotation).
func (l *File) Reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("crilog: file closed")
	}
	_ = l.w.Flush()
	_ = l.f.Close()
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		l.f = nil
		return fmt.Errorf("crilog: reopen: %w", err)
	}
	l.f = f
	l.w.Reset(f)
	return l.stat()
}

// Close flushes and closes the file.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}

// lastTimestamp reads the timestamp of the last line of the file at path.
func lastTimestamp(path string) (time.Time, error) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return time.Time{}, err
	}
	const tail = 64 * 1024
	off := max(st.Size()-tail, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return time.Time{}, err
	}
	buf = bytes.TrimRight(buf, "\n")
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
		buf = buf[i+1:]
	}
	ts, _, _ := bytes.Cut(buf, []byte(" "))
	return time.Parse(time.RFC3339Nano, string(ts))
}

// ParseLine parses one CRI log line into its parts; used by tests and tools.
func ParseLine(line []byte) (ts time.Time, stream, tag string, content []byte, err error) {
	parts := bytes.SplitN(line, []byte(" "), 4)
	if len(parts) < 3 {
		return ts, "", "", nil, fmt.Errorf("crilog: malformed line %q", line)
	}
	ts, err = time.Parse(time.RFC3339Nano, string(parts[0]))
	if err != nil {
		return ts, "", "", nil, fmt.Errorf("crilog: bad timestamp: %w", err)
	}
	stream, tag = string(parts[1]), string(parts[2])
	if stream != Stdout && stream != Stderr {
		return ts, "", "", nil, fmt.Errorf("crilog: bad stream %q", stream)
	}
	if tag != TagFull && tag != TagPartial {
		return ts, "", "", nil, fmt.Errorf("crilog: bad tag %q", tag)
	}
	if len(parts) == 4 {
		content = parts[3]
	}
	return ts, stream, tag, content, nil
}
