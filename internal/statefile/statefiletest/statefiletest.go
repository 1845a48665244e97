// Package statefiletest checks, in tests, what statefile.Quarantine did to
// a corrupt state file: the writers' corrupt-file tests (a torn or garbled
// checkpoint, record or state file) share one check instead of repeating it.
package statefiletest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Want is what MovedAside checks beyond there being exactly one file
// moved aside.
type Want struct {
	// Content, when not nil, is what the file held when it was moved.
	Content []byte
	// Log, when not nil, is the writer's log (slog's text handler): it must
	// hold a Warning naming the moved file.
	Log fmt.Stringer
}

// MovedAside fails the test unless exactly one file <path>.corrupt-* exists
// and it is as want says, and returns that file's path.
func MovedAside(t testing.TB, path string, want Want) string {
	t.Helper()
	moved, err := filepath.Glob(path + ".corrupt-*")
	if err != nil || len(moved) != 1 {
		t.Fatalf("files moved aside for %s: %v (%v), want one", filepath.Base(path), moved, err)
	}
	if want.Content != nil {
		if got, err := os.ReadFile(moved[0]); err != nil || !bytes.Equal(got, want.Content) {
			t.Fatalf("%s holds %q (%v), want the corrupt content %q", moved[0], got, err, want.Content)
		}
	}
	if want.Log != nil {
		if l := want.Log.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, moved[0]) {
			t.Fatalf("no Warning naming %s:\n%s", moved[0], l)
		}
	}
	return moved[0]
}
