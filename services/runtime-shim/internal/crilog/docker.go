package crilog

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"time"
)

// timestampedWriter turns Docker's timestamped log output of one stream
// ("<RFC3339Nano> <line>\n" per line) into CRI lines in a File, dropping lines
// not newer than skipUntil (already written before a resume).
type timestampedWriter struct {
	file      *File
	stream    string
	skipUntil time.Time
	pw        *io.PipeWriter
	done      chan error
}

// NewDockerWriter returns a writer for one stream of Docker's log output
// (already demultiplexed, requested with timestamps=true). Close it to flush.
func NewDockerWriter(f *File, stream string, skipUntil time.Time) io.WriteCloser {
	pr, pw := io.Pipe()
	w := &timestampedWriter{file: f, stream: stream, skipUntil: skipUntil, pw: pw, done: make(chan error, 1)}
	go func() { w.done <- w.run(pr) }()
	return w
}

func (w *timestampedWriter) Write(p []byte) (int, error) { return w.pw.Write(p) }

// Close ends the stream and waits until every line is in the file.
func (w *timestampedWriter) Close() error {
	_ = w.pw.Close()
	return <-w.done
}

func (w *timestampedWriter) run(r *io.PipeReader) error {
	br := bufio.NewReaderSize(r, 64*1024)
	var err error
	for {
		var line []byte
		line, err = br.ReadBytes('\n')
		if len(line) > 0 {
			// Output that ended without a newline is still written as a
			// full line: Docker does not say whether more would follow.
			line = bytes.TrimSuffix(line, []byte("\n"))
			ts := time.Now()
			if tsb, rest, ok := bytes.Cut(line, []byte(" ")); ok {
				if t, perr := time.Parse(time.RFC3339Nano, string(tsb)); perr == nil {
					ts, line = t, rest
				}
			}
			if w.skipUntil.IsZero() || ts.After(w.skipUntil) {
				if werr := w.file.WriteLine(ts, w.stream, line, false); werr != nil {
					_ = r.CloseWithError(werr)
					return werr
				}
			}
		}
		if err != nil {
			break
		}
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
