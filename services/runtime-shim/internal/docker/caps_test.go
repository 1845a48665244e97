package docker

import (
	"slices"
	"testing"

	"github.com/prometheus/procfs"
)

// TestBoundingCaps: the names follow this process's own bounding set, bit
// by bit (a process cannot gain capabilities, so every bit the names claim
// must be set, and every set bit below len(capNames) must be named).
func TestBoundingCaps(t *testing.T) {
	self, err := procfs.Self()
	if err != nil {
		t.Fatal(err)
	}
	st, err := self.NewStatus()
	if err != nil {
		t.Fatal(err)
	}
	got := boundingCaps()
	for i, name := range capNames {
		if want := st.CapBnd&(1<<uint(i)) != 0; slices.Contains(got, name) != want {
			t.Errorf("%s (bit %d): named %v, in CapBnd %#x %v", name, i, !want, st.CapBnd, want)
		}
	}
	if slices.Contains(got, "ALL") {
		t.Errorf("boundingCaps fell back to ALL: %v", got)
	}
}
