package podnet

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// MasqueradeChain is the nat chain podnet owns.
const MasqueradeChain = "MICROLET-PODNET-MASQ"

// MasqueradeRules is the iptables-restore input (nat table, --noflush)
// that (re)writes podnet's chain: traffic to the cluster's pod network
// keeps its pod source address, everything else is masqueraded. The
// chain's declaration line flushes it, so applying this twice is the same
// as once.
func MasqueradeRules(cluster netip.Prefix) string {
	return fmt.Sprintf(`*nat
:%[1]s - [0:0]
-A %[1]s -d %[2]s -m comment --comment "podnet: pod to pod keeps its source" -j RETURN
-A %[1]s -m comment --comment "podnet: pod traffic leaving the pod network" -j MASQUERADE
COMMIT
`, MasqueradeChain, cluster)
}

// jumpRule is the POSTROUTING rule sending pod-sourced traffic to the chain.
func jumpRule(cluster netip.Prefix) []string {
	return []string{"POSTROUTING", "-s", cluster.String(), "-m", "comment", "--comment", "podnet masquerade", "-j", MasqueradeChain}
}

// Iptables applies the masquerade rules with the iptables binaries of the
// image (the same backend as the node and kube-proxy: see
// docs/cluster-addons.md).
type Iptables struct {
	// Prefix runs before each iptables command, e.g. ip netns exec NAME
	// (tests); empty in the DaemonSet, which runs in the host's namespace.
	Prefix []string
}

func (t Iptables) command(ctx context.Context, args ...string) *exec.Cmd {
	all := append(append([]string{}, t.Prefix...), args...)
	return exec.CommandContext(ctx, all[0], all[1:]...)
}

// EnsureMasquerade writes podnet's chain and the POSTROUTING jump to it.
func (t Iptables) EnsureMasquerade(ctx context.Context, cluster netip.Prefix) error {
	restore := t.command(ctx, "iptables-restore", "-w", "5", "--noflush")
	restore.Stdin = strings.NewReader(MasqueradeRules(cluster))
	if out, err := restore.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore: %w: %s", err, bytes.TrimSpace(out))
	}
	jump := jumpRule(cluster)
	check := t.command(ctx, append([]string{"iptables", "-w", "5", "-t", "nat", "-C"}, jump...)...)
	if check.Run() == nil {
		return nil
	}
	add := t.command(ctx, append([]string{"iptables", "-w", "5", "-t", "nat", "-A"}, jump...)...)
	if out, err := add.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables -t nat -A %s: %w: %s", strings.Join(jump, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
