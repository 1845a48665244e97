package memtrim

import (
	"testing"

	"github.com/prometheus/procfs"
)

// TestTrimShrinksResidentExecutable: after Trim less of this test process
// is resident than before (its executable's pages went), and it goes on
// running code (this test continues) with what it needs faulted back in.
func TestTrimShrinksResidentExecutable(t *testing.T) {
	before := resident(t)
	n, err := Trim()
	if err != nil {
		t.Fatal(err)
	}
	after := resident(t)
	if n == 0 || after >= before {
		t.Fatalf("Trim advised %d bytes; resident %d kB before, %d kB after", n, before/1024, after/1024)
	}
	t.Logf("resident: %d kB before, %d kB after", before/1024, after/1024)
}

// resident is this process's RSS (smaps_rollup).
func resident(t *testing.T) uint64 {
	t.Helper()
	self, err := procfs.Self()
	if err != nil {
		t.Fatal(err)
	}
	sm, err := self.ProcSMapsRollup()
	if err != nil {
		t.Fatal(err)
	}
	return sm.Rss
}
