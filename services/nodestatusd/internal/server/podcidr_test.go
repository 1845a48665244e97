package server

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// TestPodCIDRToRuntime: once the Node gets spec.podCIDRs, nodestatusd
// hands them (comma-joined, both families) to the runtime through
// UpdateRuntimeConfig, once: later syncs with the same CIDRs send nothing.
func TestPodCIDRToRuntime(t *testing.T) {
	cp := controlplane.Get(t)
	ctx := context.Background()
	const name = "nsd-podcidr-1"
	admin := adminClient(t, cp)
	r := startRig(t, rigOpts{kubeconfig: cp.NodeKubeconfig(name), node: name, noCloud: true})
	eventually(t, "node registered", func() error {
		_, err := getNode(ctx, admin, name)
		return err
	})
	if got, _ := r.cri.received(); len(got) != 0 {
		t.Fatalf("pod CIDRs sent before the Node had any: %q", got)
	}
	patch := []byte(`{"spec":{"podCIDR":"10.244.7.0/24","podCIDRs":["10.244.7.0/24","fd00:7::/64"]}}`)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{"10.244.7.0/24,fd00:7::/64"}
	var calls int
	eventually(t, "runtime told the pod CIDRs", func() error {
		got, n := r.cri.received()
		if !slices.Equal(got, want) {
			return fmt.Errorf("UpdateRuntimeConfig pod CIDRs %q, want %q", got, want)
		}
		calls = n
		return nil
	})
	// Several more status syncs (fresh runtime readings) send nothing again.
	eventually(t, "five more runtime readings", func() error {
		if _, n := r.cri.received(); n < calls+5 {
			return fmt.Errorf("%d readings since", n-calls)
		}
		return nil
	})
	if got, _ := r.cri.received(); !slices.Equal(got, want) {
		t.Fatalf("UpdateRuntimeConfig pod CIDRs %q after more syncs, want only %q", got, want)
	}
}
