package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/microlet/microlet/internal/statefile"
)

// GeneratedFile is the configuration UpdatePodCIDR writes into the
// configuration directory. Any other valid file there wins over it.
const GeneratedFile = "99-microlet-bridge.conflist"

// GeneratedNetwork is the generated configuration's network name.
const GeneratedNetwork = "microlet-pod-network"

// UpdatePodCIDR takes the node's pod CIDRs (comma-separated, as
// UpdateRuntimeConfig carries them). With the bridge pod network it
// writes (or rewrites, when the CIDRs changed) the generated
// configuration, unless the operator installed a valid one of their own;
// otherwise the CIDRs are only checked and logged. Empty is ignored.
func (m *Manager) UpdatePodCIDR(cidrs string) error {
	if strings.TrimSpace(cidrs) == "" {
		return nil
	}
	var prefixes []netip.Prefix
	for _, s := range strings.Split(cidrs, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return &InvalidArgumentError{Field: "runtime_config.network_config.pod_cidr", Reason: fmt.Sprintf("%q is not a CIDR", s)}
		}
		prefixes = append(prefixes, p.Masked())
	}
	if m.opts.PodNetwork != PodNetworkBridge {
		m.log.Info("pod CIDR received; the CNI configuration is the operator's", "pod_cidr", cidrs)
		return nil
	}
	if other, err := m.operatorConfig(); err != nil {
		return err
	} else if other != "" {
		m.log.Info("pod CIDR received; an installed CNI configuration is used instead of the generated bridge", "pod_cidr", cidrs, "file", other)
		return nil
	}
	data, err := bridgeConfList(GeneratedNetwork, m.opts.Bridge, prefixes, filepath.Join(m.opts.DataDir, "networks"))
	if err != nil {
		return err
	}
	path := filepath.Join(m.opts.ConfDir, GeneratedFile)
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(m.opts.ConfDir, 0o755); err != nil {
		return fmt.Errorf("cni conf dir: %w", err)
	}
	if err := statefile.WriteFile(path, data, 0o644); err != nil { //nolint:gosec // CNI plugins and operators read it
		return err
	}
	m.log.Info("wrote the bridge pod network config", "file", path, "pod_cidr", cidrs, "bridge", m.opts.Bridge)
	return nil
}

// operatorConfig names the first valid configuration file that is not the
// generated one, or "".
func (m *Manager) operatorConfig() (string, error) {
	files, err := confFiles(m.opts.ConfDir)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if filepath.Base(f) == GeneratedFile {
			continue
		}
		if _, err := loadFile(f); err == nil {
			return f, nil
		}
	}
	return "", nil
}

// bridgeConfList is a bridge (gateway, masquerade, hairpin) with
// host-local addresses from each prefix (one range set per prefix, so a
// dual-stack node gives each pod one address of each family), portmap for
// host ports, firewall (it lets the pod's traffic through the FORWARD
// chain, whose policy Docker sets to DROP) and loopback.
func bridgeConfList(name, bridge string, prefixes []netip.Prefix, ipamDir string) ([]byte, error) {
	type rng struct {
		Subnet string `json:"subnet"`
	}
	type route struct {
		Dst string `json:"dst"`
	}
	var ranges [][]rng
	var routes []route
	seen := map[bool]bool{}
	for _, p := range prefixes {
		ranges = append(ranges, []rng{{Subnet: p.String()}})
		v4 := p.Addr().Is4()
		if !seen[v4] {
			seen[v4] = true
			if v4 {
				routes = append(routes, route{Dst: "0.0.0.0/0"})
			} else {
				routes = append(routes, route{Dst: "::/0"})
			}
		}
	}
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{"type": "host-local", "ranges": ranges, "routes": routes, "dataDir": ipamDir},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true},
			map[string]any{"type": "firewall"},
			map[string]any{"type": "loopback"},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}
