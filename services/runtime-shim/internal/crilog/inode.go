package crilog

import (
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
