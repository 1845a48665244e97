package cni

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// pinNetNS bind-mounts the network namespace of pid at path, so the
// namespace lives on (and DEL can still enter it) after the process exits.
// A pin already at path is replaced.
func pinNetNS(pid int, path string) error {
	if pid <= 0 {
		return fmt.Errorf("pin network namespace: no process (pid %d)", pid)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pin network namespace: %w", err)
	}
	unpinNetNS(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o400)
	if err != nil {
		return fmt.Errorf("pin network namespace: %w", err)
	}
	_ = f.Close()
	src := fmt.Sprintf("/proc/%d/ns/net", pid)
	if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("pin network namespace: bind mount %s on %s: %w", src, path, err)
	}
	return nil
}

// unpinNetNS unmounts and removes a pin; a missing one is no error.
func unpinNetNS(path string) {
	for {
		// Stacked mounts (a pin replaced by a crashed shim) come off one by one.
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			break
		}
	}
	_ = os.Remove(path)
}

// isNetNS reports whether path is a live network namespace (a pin that
// survived; after a reboot the file is there but the mount is not).
func isNetNS(path string) bool {
	if path == "" {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}
