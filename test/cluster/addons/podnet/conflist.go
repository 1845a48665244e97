package podnet

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
)

// ConflistName is the file podnet owns in the CNI configuration directory;
// the "10-" prefix makes it the one the runtime picks first.
const ConflistName = "10-podnet.conflist"

// NetworkName is the CNI network's name.
const NetworkName = "podnet"

// BridgeName is the Linux bridge the bridge plugin creates on each node.
const BridgeName = "podnet0"

// Conflist renders the node's CNI configuration for podCIDR: a bridge
// with its gateway on the first address and the pod's default route
// through it, host-local IPAM handing out the rest, portmap for hostPort,
// and loopback. Masquerade is left to podnet (ipMasq off), which knows the
// whole cluster's pod network; the bridge plugin would only exempt the
// node's own range.
func Conflist(podCIDR string) ([]byte, error) {
	p, err := netip.ParsePrefix(podCIDR)
	if err != nil || p != p.Masked() {
		return nil, fmt.Errorf("podCIDR %q: not a network CIDR", podCIDR)
	}
	if !p.Addr().Is4() || p.Bits() > 30 {
		return nil, fmt.Errorf("podCIDR %q: must be an IPv4 network of at least 4 addresses", podCIDR)
	}
	type m = map[string]any
	conf := m{
		"cniVersion": "1.0.0",
		"name":       NetworkName,
		"plugins": []m{
			{
				"type":             "bridge",
				"bridge":           BridgeName,
				"isDefaultGateway": true,
				"ipMasq":           false,
				"hairpinMode":      true,
				"ipam": m{
					"type":   "host-local",
					"ranges": [][]m{{{"subnet": p.String()}}},
					// No "routes": isDefaultGateway adds the pod's default
					// route, and a second one fails the ADD (file exists).
				},
			},
			{"type": "portmap", "capabilities": m{"portMappings": true}},
			{"type": "loopback"},
		},
	}
	out, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// WriteConflist replaces dir/ConflistName with data atomically (a
// temporary file in dir, synced, renamed), so the runtime never reads a
// half-written configuration. It reports whether the content changed.
func WriteConflist(dir string, data []byte) (bool, error) {
	dst := filepath.Join(dir, ConflistName)
	if old, err := os.ReadFile(dst); err == nil && string(old) == string(data) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(dir, "."+ConflistName+".*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return false, err
	}
	return true, nil
}
