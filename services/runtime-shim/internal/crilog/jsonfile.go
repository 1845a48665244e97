package crilog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/fsnotify/fsnotify"
)

// Copier copies one container's Docker json-file log into a CRI log File.
//
// It reads Docker's files itself rather than through the logs API, whose
// follow loses and repeats lines across Docker's own rotation. Docker
// rotates by rename (<id>-json.log becomes .1, .1 becomes .2, the last is
// deleted) and never writes a file again once it is renamed, so the copier
// keeps the file it reads open — an fd outlives both rename and deletion —
// reads it to its end once the name points at a new inode, and goes on with
// the file that followed it, found by inode (and, since a file system
// reuses a deleted file's inode number, checked by its first line).
//
// After every batch it records, in a small position file, the inode and byte
// offset it reached in Docker's log with the CRI file's inode and size at
// that moment. A copier started again after a crash cuts the CRI file back
// to the recorded size and reads on from the recorded offset: every line
// once, whatever instant the previous process died at.
type Copier struct {
	mu   sync.Mutex // held while a batch is copied and recorded; Reopen takes it
	file *File
	src  string // Docker's log (the newest file of the chain)
	pos  *os.File
	log  *slog.Logger

	cur     *os.File // file being read, nil until Docker created it
	curIno  uint64
	curID   uint64 // firstLineID of cur, 0 until it has a line
	off     int64  // offset in cur of the first byte not yet copied
	buf     []byte // bytes read from cur past off: an unfinished line
	skip    time.Time
	scratch []byte // decoded content of the line being copied
	lost    bool   // set once lines were lost to Docker's rotation
	closed  bool
}

// Position is what a Copier records after each batch.
type Position struct {
	Ino     uint64 // inode of the Docker log file read
	ID      uint64 // its firstLineID (0: not known)
	Off     int64  // offset of the next line in it
	CRIIno  uint64 // inode of the CRI file written
	CRISize int64  // its size after the lines before Off
}

const posLen = 96

func (p Position) encode() []byte {
	b := fmt.Appendf(nil, "v1 %d %d %d %d %d", p.Ino, p.ID, p.Off, p.CRIIno, p.CRISize)
	b = append(b, bytes.Repeat([]byte(" "), posLen-1-len(b))...)
	return append(b, '\n')
}

func decodePosition(b []byte) (Position, bool) {
	var p Position
	f := strings.Fields(string(b))
	if len(f) != 6 || f[0] != "v1" {
		return p, false
	}
	var err [5]error
	p.Ino, err[0] = strconv.ParseUint(f[1], 10, 64)
	p.ID, err[1] = strconv.ParseUint(f[2], 10, 64)
	p.Off, err[2] = strconv.ParseInt(f[3], 10, 64)
	p.CRIIno, err[3] = strconv.ParseUint(f[4], 10, 64)
	p.CRISize, err[4] = strconv.ParseInt(f[5], 10, 64)
	return p, errors.Join(err[:]...) == nil
}

// ReadPosition reads the position a Copier recorded at path.
func ReadPosition(path string) (Position, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Position{}, false
	}
	return decodePosition(b)
}

// copyBufSize is what a Copier reads at once. A node keeps one Copier per
// running container for the container's life, so the buffer is small (a
// line longer than it doubles it until the line is complete, and the grown
// buffer is dropped once empty): 110 idle containers hold 3.5 MiB, not the
// 27.5 MiB a 256 KiB buffer each came to.
const copyBufSize = 32 << 10

// NewCopier prepares the copy of the Docker json-file log at src (with its
// rotated siblings src.1, src.2, ...) into file, recording its position at
// posPath. With a recorded position it resumes there; without one it starts
// at the oldest file Docker still has, skipping lines not newer than the
// last one already in file (a file written by an older runtime-shim).
func NewCopier(file *File, src, posPath string, log *slog.Logger) (*Copier, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(filepath.Dir(posPath), 0o700); err != nil {
		return nil, fmt.Errorf("crilog: %w", err)
	}
	p, havePos := ReadPosition(posPath)
	pos, err := os.OpenFile(posPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("crilog: %w", err)
	}
	c := &Copier{file: file, src: src, pos: pos, log: log}
	if havePos {
		if ino, size := file.State(); ino == p.CRIIno && size > p.CRISize {
			// Lines written after the record: copied again below.
			if err := file.Truncate(p.CRISize); err != nil {
				_ = pos.Close()
				return nil, err
			}
		}
		c.openAt(p.Ino, p.ID, p.Off)
	} else {
		if _, size := file.State(); size > 0 {
			c.skip = file.LastTimestamp()
		}
		c.openAt(0, 0, 0)
	}
	return c, nil
}

// chain lists Docker's log files newest first: src, src.1, src.2, ...,
// with their inodes.
func (c *Copier) chain() (names []string, inos []uint64) {
	for i := 0; ; i++ {
		name := c.src
		if i > 0 {
			name += "." + strconv.Itoa(i)
		}
		st, err := os.Stat(name)
		if err != nil {
			if i == 0 {
				continue // not created yet, or rotated this instant
			}
			return names, inos
		}
		names, inos = append(names, name), append(inos, inode(st))
	}
}

// openAt opens the file with inode ino and first-line id at off, or when ino
// is 0 or gone the oldest file of the chain at 0.
func (c *Copier) openAt(ino, id uint64, off int64) {
	for range 10 { // a rotation between the listing and the open: list again
		names, inos := c.chain()
		if len(names) == 0 {
			return // Docker has not created the log yet
		}
		i := len(names) - 1
		if ino != 0 {
			if j := indexOf(inos, ino); j >= 0 {
				i = j
			} else {
				c.lose("resume position %d:%d no longer in Docker's log", ino, off)
				off = 0
			}
		}
		if !c.open(names[i], inos[i], off) {
			continue
		}
		if ino != 0 && id != 0 && c.curID != id {
			// The inode number of a deleted file, reused.
			c.lose("resume position %d:%d no longer in Docker's log", ino, off)
			ino, off = 0, 0
			continue
		}
		return
	}
}

// open opens name, checking it is still the inode the listing saw.
func (c *Copier) open(name string, ino uint64, off int64) bool {
	f, err := os.Open(name)
	if err != nil {
		return false
	}
	st, err := f.Stat()
	if err != nil || inode(st) != ino {
		_ = f.Close()
		return false
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		_ = f.Close()
		return false
	}
	if c.cur != nil {
		_ = c.cur.Close()
	}
	c.cur, c.curIno, c.curID, c.off, c.buf = f, ino, firstLineID(f), off, c.buf[:0]
	return true
}

func indexOf(s []uint64, v uint64) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func (c *Copier) lose(format string, args ...any) {
	c.lost = true
	c.log.Warn("CRI log: lines lost, Docker rotated them away before they were copied", "log", c.src, "detail", fmt.Sprintf(format, args...))
}

// Lost reports whether lines were lost to Docker's rotation (the copier fell
// behind by Docker's whole bounded log, or was stopped that long).
func (c *Copier) Lost() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost
}

// Run copies until ctx is done or, once exited is closed (the container
// stopped, so Docker has written its last line), everything is copied.
func (c *Copier) Run(ctx context.Context, exited <-chan struct{}) error {
	wake := make(chan struct{}, 1)
	if w, err := fsnotify.NewWatcher(); err == nil {
		defer w.Close()
		if err := w.Add(filepath.Dir(c.src)); err == nil {
			go func() {
				for {
					select {
					case _, ok := <-w.Events:
						if !ok {
							return
						}
						select {
						case wake <- struct{}{}:
						default:
						}
					case _, ok := <-w.Errors:
						if !ok {
							return
						}
					}
				}
			}()
		}
	}
	// The watch is the fast path; the tick covers a missed event.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	done := false
	for {
		progressed, err := c.step()
		if err != nil {
			return err
		}
		if progressed {
			continue
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			exited = nil
			done = true // one more pass, then stop
		case <-wake:
		case <-tick.C:
		}
	}
}

// step copies what is readable now and follows a rotation; it reports
// whether it made progress.
func (c *Copier) step() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false, errors.New("crilog: copier closed")
	}
	if c.cur == nil {
		c.openAt(0, 0, 0)
		if c.cur == nil {
			return false, nil
		}
	}
	n, err := c.copyAvailable()
	if err != nil || n > 0 {
		return n > 0, err
	}
	// At the end of cur: has Docker moved on to a new file? (A deleted cur
	// may share its inode number with Docker's newest file.)
	st, err := os.Stat(c.src)
	if err != nil || (inode(st) == c.curIno && !unlinked(c.cur)) {
		return false, nil
	}
	// Renamed: Docker wrote its last line to it before the rename.
	for {
		n, err := c.copyAvailable()
		if err != nil {
			return false, err
		}
		if n == 0 {
			break
		}
	}
	if len(c.buf) > 0 {
		c.log.Warn("CRI log: unterminated line at the end of a rotated file dropped", "log", c.src, "bytes", len(c.buf))
	}
	c.next()
	return true, nil
}

// next opens the file that followed cur.
func (c *Copier) next() {
	for range 10 {
		names, inos := c.chain()
		i := -1
		if !unlinked(c.cur) {
			// Linked, so no other file has its inode number.
			i = indexOf(inos, c.curIno)
		}
		switch {
		case i == 0:
			return // listed before the rename we saw; step again
		case i > 0:
			if c.open(names[i-1], inos[i-1], 0) {
				return
			}
		default:
			// Deleted: the files after it may be gone as well.
			c.lose("file %d deleted before it was read to the end", c.curIno)
			if len(names) > 0 && c.open(names[len(names)-1], inos[len(inos)-1], 0) {
				return
			}
		}
	}
}

// copyAvailable reads from cur, writes the complete lines and records the
// position; it returns the bytes read.
func (c *Copier) copyAvailable() (int, error) {
	switch {
	case cap(c.buf) == 0:
		c.buf = make([]byte, 0, copyBufSize)
	case len(c.buf) == cap(c.buf):
		// An unfinished line fills the buffer: double it.
		c.buf = append(c.buf, make([]byte, cap(c.buf))...)[:len(c.buf)]
	}
	n, err := c.cur.Read(c.buf[len(c.buf):cap(c.buf)])
	if n == 0 {
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("crilog: read %s: %w", c.src, err)
		}
		return 0, nil
	}
	c.buf = c.buf[:len(c.buf)+n]
	data, used := c.buf, 0
	for {
		i := bytes.IndexByte(data[used:], '\n')
		if i < 0 {
			break
		}
		line := data[used : used+i]
		used += i + 1
		if err := c.copyLine(line); err != nil {
			return n, err
		}
	}
	if used == 0 {
		return n, nil
	}
	c.off += int64(used)
	c.buf = c.buf[:copy(c.buf, data[used:])]
	if len(c.buf) == 0 && cap(c.buf) > copyBufSize {
		c.buf = nil // a long line grew it; the next read starts small again
	}
	return n, c.record()
}

func (c *Copier) copyLine(line []byte) error {
	e, scratch, err := parseJSONLine(line, c.scratch)
	c.scratch = scratch
	if err != nil {
		c.log.Warn("CRI log: unreadable line in Docker's log skipped", "log", c.src, "err", err)
		return nil
	}
	if !c.skip.IsZero() {
		if !e.time.After(c.skip) {
			return nil
		}
		c.skip = time.Time{}
	}
	content, partial := e.log, true
	if n := len(content); n > 0 && content[n-1] == '\n' {
		content, partial = content[:n-1], false
	}
	return c.file.Append(e.time, e.stream, content, partial)
}

// record flushes the CRI file and then records the position.
func (c *Copier) record() error {
	if err := c.file.Flush(); err != nil {
		return err
	}
	ino, size := c.file.State()
	if c.curID == 0 && c.off > 0 {
		c.curID = firstLineID(c.cur)
	}
	if _, err := c.pos.WriteAt(Position{Ino: c.curIno, ID: c.curID, Off: c.off, CRIIno: ino, CRISize: size}.encode(), 0); err != nil {
		return fmt.Errorf("crilog: record position: %w", err)
	}
	return nil
}

// Reopen reopens the CRI file after the caller rotated it, between two
// batches, recording the position on both sides so a crash in between
// neither repeats nor drops a line.
func (c *Copier) Reopen() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur != nil {
		if err := c.record(); err != nil {
			return err
		}
	}
	if err := c.file.Reopen(); err != nil {
		return err
	}
	if c.cur != nil {
		return c.record()
	}
	return nil
}

// Close closes Docker's file and the position file (not the CRI file).
func (c *Copier) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cur != nil {
		_ = c.cur.Close()
	}
	return c.pos.Close()
}

type jsonEntry struct {
	log    []byte
	stream string
	time   time.Time
}

var (
	prefixLog = []byte(`{"log":"`)
	keyStream = []byte(`"stream":"`)
	keyTime   = []byte(`"time":"`)
)

// parseJSONLine parses one line of Docker's json-file log,
// {"log":"...","stream":"stdout","time":"..."} (attrs may sit between), by
// hand in the layout Docker writes and with encoding/json otherwise. The
// returned log may alias scratch.
func parseJSONLine(line, scratch []byte) (jsonEntry, []byte, error) {
	var e jsonEntry
	if rest, ok := bytes.CutPrefix(line, prefixLog); ok {
		var n int
		if e.log, n, ok = unquote(rest, scratch[:0]); ok {
			scratch = e.log
			rest = rest[n:]
			if s := bytes.Index(rest, keyStream); s >= 0 {
				r := rest[s+len(keyStream):]
				switch {
				case bytes.HasPrefix(r, []byte(`stdout"`)):
					e.stream = Stdout
				case bytes.HasPrefix(r, []byte(`stderr"`)):
					e.stream = Stderr
				}
			}
			if t := bytes.LastIndex(rest, keyTime); t >= 0 && e.stream != "" {
				r := rest[t+len(keyTime):]
				if q := bytes.IndexByte(r, '"'); q >= 0 {
					if ts, err := time.Parse(time.RFC3339Nano, string(r[:q])); err == nil {
						e.time = ts
						return e, scratch, nil
					}
				}
			}
		}
	}
	var j struct {
		Log    string    `json:"log"`
		Stream string    `json:"stream"`
		Time   time.Time `json:"time"`
	}
	if err := json.Unmarshal(line, &j); err != nil {
		return e, scratch, err
	}
	if j.Stream != Stdout && j.Stream != Stderr {
		return e, scratch, fmt.Errorf("stream %q", j.Stream)
	}
	return jsonEntry{log: []byte(j.Log), stream: j.Stream, time: j.Time}, scratch, nil
}

// unquote decodes the JSON string body at the start of src (after its
// opening quote) into dst; n is the length up to and including the closing
// quote. It reports false for anything it does not handle exactly as
// encoding/json would, leaving those to it.
func unquote(src, dst []byte) (out []byte, n int, ok bool) {
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '"':
			return dst, i + 1, true
		case c == '\\':
			if i+1 >= len(src) {
				return nil, 0, false
			}
			switch src[i+1] {
			case 'n':
				dst = append(dst, '\n')
			case 't':
				dst = append(dst, '\t')
			case 'r':
				dst = append(dst, '\r')
			case '"', '\\', '/':
				dst = append(dst, src[i+1])
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'u':
				if i+6 > len(src) {
					return nil, 0, false
				}
				r, err := strconv.ParseUint(string(src[i+2:i+6]), 16, 16)
				if err != nil || utf16.IsSurrogate(rune(r)) {
					return nil, 0, false // pairs: leave to encoding/json
				}
				dst = utf8.AppendRune(dst, rune(r))
				i += 6
				continue
			default:
				return nil, 0, false
			}
			i += 2
		case c < 0x20 || c >= utf8.RuneSelf:
			if c < 0x20 {
				return nil, 0, false
			}
			r, size := utf8.DecodeRune(src[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, 0, false
			}
			dst = append(dst, src[i:i+size]...)
			i += size
		default:
			j := i + 1
			for j < len(src) && src[j] >= 0x20 && src[j] < utf8.RuneSelf && src[j] != '"' && src[j] != '\\' {
				j++
			}
			dst = append(dst, src[i:j]...)
			i = j
		}
	}
	return nil, 0, false
}
