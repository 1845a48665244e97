package podnet

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/microlet/microlet/internal/testenv"
)

// TestEnsureMasqueradeInNetns applies the masquerade rules twice with the
// host's iptables inside a named network namespace of the test's own and
// counts what iptables-save then shows: one chain, its two rules, one jump.
func TestEnsureMasqueradeInNetns(t *testing.T) {
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		testenv.RequireOrSkip(t, "no iptables-restore (Debian iptables): %v", err)
	}
	name := fmt.Sprintf("podnet-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		testenv.RequireOrSkip(t, "ip netns add (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ipt := Iptables{Prefix: []string{"ip", "netns", "exec", name}}
	cluster := netip.MustParsePrefix("10.244.0.0/16")
	ctx := context.Background()
	for range 2 {
		if err := ipt.EnsureMasquerade(ctx, cluster); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("ip", "netns", "exec", name, "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v: %s", err, out)
	}
	count := func(substr string) int { return strings.Count(string(out), substr) }
	if n := count("-A POSTROUTING -s 10.244.0.0/16"); n != 1 {
		t.Errorf("%d jump rules, want 1:\n%s", n, out)
	}
	if n := count("-A " + MasqueradeChain + " -d 10.244.0.0/16"); n != 1 {
		t.Errorf("%d RETURN rules, want 1:\n%s", n, out)
	}
	if n := count("-j MASQUERADE"); n != 1 {
		t.Errorf("%d MASQUERADE rules, want 1:\n%s", n, out)
	}
}
