package cninet

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// EnvRequire turns missing plugins (or not being root) into a failure
// instead of a skip, as for every suite `make test` runs.
const EnvRequire = testenv.EnvRequire

// EnvCNIBinDir overrides where Plugins looks for the plugins.
const EnvCNIBinDir = "MICROLET_CNI_BIN_DIR"

// PluginNames are the plugins hack/build-cni-plugins.sh builds.
var PluginNames = []string{"bridge", "host-local", "loopback", "portmap", "firewall", "bandwidth"}

var pluginsPin = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/containernetworking/plugins (v\S+)`)

// Plugins returns the directory of the CNI reference plugins built by
// hack/build-cni-plugins.sh (the version test/cniplugins pins, in the
// microlet cache) or $MICROLET_CNI_BIN_DIR. When they are missing the test
// is skipped, or fails with MICROLET_REQUIRE_CONTROLPLANE=1.
func Plugins(t testing.TB) string {
	t.Helper()
	dir, err := findCNIPlugins()
	if err != nil {
		testenv.RequireOrSkip(t, "CNI plugins missing (run hack/build-cni-plugins.sh): %v", err)
	}
	return dir
}

func findCNIPlugins() (string, error) {
	dir := os.Getenv(EnvCNIBinDir)
	if dir == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			return "", err
		}
		mod, err := os.ReadFile(filepath.Join(root, "test", "cniplugins", "go.mod"))
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
	for _, p := range PluginNames {
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

// Net is one test's private pod network: its own bridge, a /24 of
// 10.244.0.0/16 that no address of this host lies in, its own
// configuration and host-local directories. The bridge is deleted when the
// test ends.
type Net struct {
	// Name is the network's name, Bridge its bridge device.
	Name, Bridge string
	Subnet       netip.Prefix
	// BinDir holds the plugins; ConfDir the configuration; IPAMDir is
	// host-local's store (a file per address under IPAMDir/Name).
	BinDir, ConfDir, IPAMDir string
}

// New makes the network (writing no configuration yet). It skips like
// Plugins, and when not root.
func New(t testing.TB) *Net {
	t.Helper()
	bin := Plugins(t)
	testenv.RequireRoot(t, "the CNI plugins (network namespaces, iptables)")
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	sfx := hex.EncodeToString(b)
	n := &Net{Name: "mlt-" + sfx, Bridge: "mlt" + sfx, BinDir: bin, ConfDir: t.TempDir(), IPAMDir: t.TempDir()}
	for tries := 0; ; tries++ {
		third, _ := rand.Int(rand.Reader, big.NewInt(150))
		n.Subnet = netip.MustParsePrefix(fmt.Sprintf("10.244.%d.0/24", 100+third.Int64()))
		if !hostAddressIn(n.Subnet) || tries > 20 {
			break
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", n.Bridge).Run() })
	return n
}

// hostAddressIn reports whether an address of this host lies in p.
func hostAddressIn(p netip.Prefix) bool {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok && p.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return false
}

// Conflist is a bridge (no masquerade: tests stay on the node) with
// host-local addresses, portmap, firewall (Docker's FORWARD policy is
// DROP) and loopback.
func (n *Net) Conflist() []byte {
	plugins := []any{
		map[string]any{"type": "bridge", "bridge": n.Bridge, "isGateway": true, "hairpinMode": true,
			"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": n.Subnet.String()}}},
				"routes": []map[string]string{{"dst": "0.0.0.0/0"}}, "dataDir": n.IPAMDir}},
		map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true},
		map[string]any{"type": "firewall"},
		map[string]any{"type": "loopback"},
	}
	b, _ := json.MarshalIndent(map[string]any{"cniVersion": "1.0.0", "name": n.Name, "plugins": plugins}, "", "  ")
	return b
}

// Install writes data as file into the configuration directory.
func (n *Net) Install(t testing.TB, file string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(n.ConfDir, file), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// ShimArgs are the runtime-shim flags of the cni mode on this network
// (a missing directory first in the plugin path, which must not matter).
func (n *Net) ShimArgs(extra ...string) []string {
	return append([]string{"--network-plugin=cni", "--cni-conf-dir=" + n.ConfDir, "--cni-bin-dir=/nonexistent," + n.BinDir}, extra...)
}

// Allocated lists the addresses host-local holds in dir for network.
func Allocated(t testing.TB, dir, network string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, network))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			out[e.Name()] = true
		}
	}
	return out
}
