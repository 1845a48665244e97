package nodeshutdown

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWriteDropIn: the drop-in holds the delay in whole seconds, replaces
// an older one, and leaves nothing else in logind's directory (logind
// reads every *.conf there).
func TestWriteDropIn(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logind.conf.d")
	path := filepath.Join(dir, "99-microlet.conf")
	for _, d := range []time.Duration{30 * time.Second, 1500 * time.Millisecond} {
		if err := WriteDropIn(path, d); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "[Login]\nInhibitDelayMaxSec=2\n") {
		t.Errorf("drop-in:\n%s", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("logind's directory holds %d files, want only the drop-in: %v", len(ents), ents)
	}
}
