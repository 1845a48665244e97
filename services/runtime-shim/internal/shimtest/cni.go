package shimtest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// EnvCNIBinDir overrides where CNIPlugins looks for the plugins.
const EnvCNIBinDir = "MICROLET_CNI_BIN_DIR"

// CNIPluginNames are the plugins hack/build-cni-plugins.sh builds.
var CNIPluginNames = []string{"bridge", "host-local", "loopback", "portmap", "firewall", "bandwidth"}

var pluginsPin = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/containernetworking/plugins (v\S+)`)

// CNIPlugins returns the directory of the CNI reference plugins built by
// hack/build-cni-plugins.sh (the version test/cniplugins pins, in the
// microlet cache) or $MICROLET_CNI_BIN_DIR. When they are missing the test
// is skipped, or fails with MICROLET_REQUIRE_CONTROLPLANE=1.
func CNIPlugins(t testing.TB) string {
	t.Helper()
	dir, err := findCNIPlugins()
	if err != nil {
		if require() {
			t.Fatalf("CNI plugins: %v", err)
		}
		t.Skipf("CNI plugins missing (run hack/build-cni-plugins.sh; set MICROLET_REQUIRE_CONTROLPLANE=1 to fail instead): %v", err)
	}
	return dir
}

func findCNIPlugins() (string, error) {
	dir := os.Getenv(EnvCNIBinDir)
	if dir == "" {
		mod, err := os.ReadFile(filepath.Join(repoRoot(), "test", "cniplugins", "go.mod"))
		if err != nil {
			return "", err
		}
		m := pluginsPin.FindSubmatch(mod)
		if m == nil {
			return "", fmt.Errorf("no github.com/containernetworking/plugins version in test/cniplugins/go.mod")
		}
		cache := os.Getenv("MICROLET_CACHE_DIR")
		if cache == "" {
			base := os.Getenv("XDG_CACHE_HOME")
			if base == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return "", err
				}
				base = filepath.Join(home, ".cache")
			}
			cache = filepath.Join(base, "microlet")
		}
		dir = filepath.Join(cache, "cni-plugins", string(m[1]))
	}
	for _, p := range CNIPluginNames {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			return "", err
		}
		if st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s is not executable", filepath.Join(dir, p))
		}
	}
	return dir, nil
}
