package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A build directory whose test process is gone is removed by the next
// process's first Build; one whose process still runs is left alone.
func TestSweepBuiltRemovesOnlyDeadProcessesDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(tmp, fmt.Sprintf("%s%d-1", builtPrefix, gone.Process.Pid))
	live := filepath.Join(tmp, fmt.Sprintf("%s%d-1", builtPrefix, os.Getppid()))
	other := filepath.Join(tmp, "microlet-testbinary")
	for _, d := range []string{dead, live, other} {
		if err := os.MkdirAll(filepath.Join(d, "b1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sweepBuilt()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("%s of a gone process still there: %v", dead, err)
	}
	for _, d := range []string{live, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}
