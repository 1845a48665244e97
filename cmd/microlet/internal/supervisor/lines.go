package supervisor

import (
	"bufio"
	"io"
	"sync"
)

// maxLine bounds one prefixed line; longer output is split, never dropped.
const maxLine = 64 << 10

// copyLines writes each line of r to out behind prefix, whole lines at a
// time so the children's output never interleaves mid-line. last, if not
// nil, keeps the final line for error messages.
func (s *Supervisor) copyLines(r io.ReadCloser, out io.Writer, prefix string, last *lastLine) {
	defer func() { _ = r.Close() }()
	br := bufio.NewReaderSize(r, maxLine)
	buf := make([]byte, 0, 256)
	for {
		line, isPrefix, err := br.ReadLine()
		if len(line) > 0 || (err == nil && !isPrefix) {
			buf = append(buf[:0], prefix...)
			buf = append(buf, line...)
			buf = append(buf, '\n')
			s.outMu.Lock()
			_, _ = out.Write(buf)
			s.outMu.Unlock()
			if last != nil && len(line) > 0 {
				last.set(string(line))
			}
		}
		if err != nil {
			return
		}
	}
}

// lastLine remembers the most recent line a child wrote to stderr.
type lastLine struct {
	mu   sync.Mutex
	line string
}

func (l *lastLine) set(s string) {
	l.mu.Lock()
	l.line = s
	l.mu.Unlock()
}

func (l *lastLine) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.line
}
