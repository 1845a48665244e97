package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// recordTB records what RequireOrSkip asked of the test instead of ending it.
type recordTB struct {
	testing.TB
	skipped, failed string
}

func (r *recordTB) Helper()                           {}
func (r *recordTB) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recordTB) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestRequireOrSkip(t *testing.T) {
	for _, tc := range []struct {
		env        string
		wantFailed bool
	}{{"", false}, {"0", false}, {"1", true}} {
		t.Run("env="+tc.env, func(t *testing.T) {
			t.Setenv(EnvRequire, tc.env)
			r := &recordTB{TB: t}
			RequireOrSkip(r, "no %s here", "widget")
			got, other := r.skipped, r.failed
			if tc.wantFailed {
				got, other = r.failed, r.skipped
			}
			if !strings.Contains(got, "no widget here") || !strings.Contains(got, EnvRequire) || other != "" {
				t.Errorf("skipped %q, failed %q; want the reason and %s in the %s message only",
					r.skipped, r.failed, EnvRequire, map[bool]string{true: "failure", false: "skip"}[tc.wantFailed])
			}
		})
	}
}
