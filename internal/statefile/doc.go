// Package statefile is the one way microlet writes a file it owns and
// reads it back after a crash. WriteFile writes a temporary file in the
// target's directory, fsyncs it, renames it over the target and fsyncs the
// directory, so after a power loss the target holds either the old or the
// new content, never a torn mix. Sweep, called once at start, removes the
// temporary files a crash left behind (only its own, recognised by name).
// Quarantine moves a file that no longer decodes aside as
// <name>.corrupt-<time> and logs one Warning line, so the service can
// start from what it can rebuild instead of failing on every start.
//
//	removed, _ := statefile.Sweep(dir)
//	if err := json.Unmarshal(b, &v); err != nil {
//		statefile.Quarantine(log, path, err) // then rebuild
//	}
//	err := statefile.WriteFile(path, data, 0o600) // errors.Is(err, syscall.ENOSPC) when the disk is full
package statefile
