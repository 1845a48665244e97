package testenv

import (
	"fmt"
	"os"
	"testing"
)

// EnvRequire is the one switch for environment skips: with
// MICROLET_REQUIRE_CONTROLPLANE=1, which `make test` sets, a test that
// finds a host fact missing (a binary, Docker, root, a cgroup v1 tree, an
// IPv4 address, ...) fails instead of skipping, so a run can never pass by
// skipping. docs/testing.md lists what the suite needs from the host.
const EnvRequire = "MICROLET_REQUIRE_CONTROLPLANE"

// Required reports whether EnvRequire is set to 1.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// RequireOrSkip ends the test because the host lacks what it needs, as
// the formatted reason says: it skips the test, or fails it when
// Required. Every skip for a missing environment goes through it; skips
// that are choices (-short, opt-in benchmarks) do not.
func RequireOrSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (%s=1: this host must provide it, see docs/testing.md)", reason, EnvRequire)
		return
	}
	t.Skipf("%s (set %s=1 to fail instead)", reason, EnvRequire)
}

// IsRoot reports whether the test runs as root.
func IsRoot() bool { return os.Geteuid() == 0 }

// RequireRoot skips the test, or fails it when Required, unless it runs
// as root; why says what needs root.
func RequireRoot(t testing.TB, why string) {
	t.Helper()
	if !IsRoot() {
		RequireOrSkip(t, "%s needs root", why)
	}
}
