package statefile

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// tempMarker is part of every temporary file name WriteFile creates, so
// Sweep removes only files this package wrote.
const tempMarker = ".statefile-tmp-"

// corruptMarker separates a quarantined file's name from its time stamp.
const corruptMarker = ".corrupt-"

// timeFormat is the quarantine time stamp: UTC, sortable, no colons.
const timeFormat = "20060102T150405.000000000Z"

// WriteFile replaces path with data crash-safely: temporary file in the
// same directory, fsync, rename, fsync of the directory. On any error the
// temporary file is removed and path keeps its previous content; the
// error names path and wraps the cause (syscall.ENOSPC on a full disk).
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	if err := writeFile(path, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func writeFile(path string, data []byte, perm fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+tempMarker+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes 0600; set the wanted mode before the content is
	// visible under the target's name.
	if err = tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory, making a rename, create or remove in it
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	return errors.Join(serr, cerr)
}

// IsTemp reports whether name (a base name) is one of WriteFile's
// temporary files, so directory listings can skip them.
func IsTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tempMarker)
}

// Sweep removes the temporary files WriteFile left in dir when the process
// died mid-write, and returns their paths. A missing dir is no error.
// Call it at start, before anything writes in dir.
func Sweep(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range ents {
		if e.IsDir() || !IsTemp(e.Name()) {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sweep %s: %w", p, err))
			continue
		}
		removed = append(removed, p)
	}
	if len(removed) > 0 {
		if err := SyncDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("sweep %s: %w", dir, err))
		}
	}
	return removed, errors.Join(errs...)
}

// Quarantine moves a file that cannot be decoded aside, as
// <path>.corrupt-<UTC time>, and logs one Warning line naming both paths
// and reason. It returns the new path. The caller then carries on as if
// the file were absent and rebuilds what it held.
func Quarantine(log *slog.Logger, path string, reason error) (string, error) {
	return quarantineAt(log, path, reason, time.Now())
}

func quarantineAt(log *slog.Logger, path string, reason error, now time.Time) (string, error) {
	aside := path + corruptMarker + now.UTC().Format(timeFormat)
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := SyncDir(filepath.Dir(path)); err != nil {
		return aside, fmt.Errorf("quarantine %s: %w", path, err)
	}
	if log != nil {
		log.Warn("moved a corrupt state file aside; starting from what can be rebuilt", "file", path, "moved_to", aside, "reason", reason)
	}
	return aside, nil
}

// QuarantineReplace is Quarantine for a file whose safe replacement is
// known: the corrupt file is kept aside under the same name Quarantine
// gives it, and data takes its place with WriteFile, so that at every
// moment, a crash included, path holds either the old bytes or data, never
// nothing. For state whose absence means something less safe than the
// replacement (podsyncd's image pull records).
func QuarantineReplace(log *slog.Logger, path string, reason error, data []byte, perm fs.FileMode) (string, error) {
	aside := path + corruptMarker + time.Now().UTC().Format(timeFormat)
	if err := os.Link(path, aside); err != nil {
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if err := WriteFile(path, data, perm); err != nil {
		_ = os.Remove(aside)
		return "", fmt.Errorf("quarantine %s: %w", path, err)
	}
	if log != nil {
		log.Warn("moved a corrupt state file aside and replaced it", "file", path, "moved_to", aside, "reason", reason)
	}
	return aside, nil
}

// IsQuarantined reports whether name (a base name) is a file Quarantine
// moved aside, so directory listings can skip it.
func IsQuarantined(name string) bool {
	return strings.Contains(name, corruptMarker)
}
