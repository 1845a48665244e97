package docker

import (
	"slices"
	"testing"
)

// TestParseProcStatusUser: the real IDs, the primary group first and the
// supplementary groups after it without repeating it; a file without the
// ID lines or with a bad group is an error.
func TestParseProcStatusUser(t *testing.T) {
	const status = "Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t1001\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t1000 50000 60000 \nNStgid:\t7\n"
	u, err := parseProcStatusUser([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	l := u.GetLinux()
	if l.Uid != 1000 || l.Gid != 1000 || !slices.Equal(l.SupplementalGroups, []int64{1000, 50000, 60000}) {
		t.Errorf("user = %v, want uid 1000 gid 1000 groups [1000 50000 60000]", l)
	}
	u, err = parseProcStatusUser([]byte("Uid:\t0\t0\t0\t0\nGid:\t3000\t3000\t3000\t3000\nGroups:\t5 2000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l := u.GetLinux(); l.Uid != 0 || l.Gid != 3000 || !slices.Equal(l.SupplementalGroups, []int64{3000, 5, 2000}) {
		t.Errorf("user = %v, want uid 0 gid 3000 groups [3000 5 2000]", l)
	}
	for _, bad := range []string{"Name:\tsh\n", "Uid:\t0\t0\t0\t0\n", "Uid:\t0\nGid:\t0\nGroups:\tx\n", "Uid:\nGid:\t0\n"} {
		if _, err := parseProcStatusUser([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
