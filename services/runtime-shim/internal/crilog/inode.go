package crilog

import (
	"bytes"
	"hash/fnv"
	"os"
	"syscall"
)

// inode is the inode number of a file (0 when the platform has none).
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// unlinked reports whether the open file f has been deleted.
func unlinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}

// firstLineID identifies a log file by a hash of its first line (Docker's
// first line carries a nanosecond timestamp), because a file system hands a
// deleted file's inode number to the next file created: Docker's newest
// file often has the number of the one it just deleted. 0 means the file
// has no complete line yet.
func firstLineID(f *os.File) uint64 {
	buf := make([]byte, 4096)
	n, _ := f.ReadAt(buf, 0)
	i := bytes.IndexByte(buf[:n], '\n')
	if i < 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write(buf[:i])
	return h.Sum64() | 1
}
