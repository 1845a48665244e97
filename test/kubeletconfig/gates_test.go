package kubeletconfig

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	ours "github.com/microlet/microlet/internal/kubeletconfig"
	"github.com/microlet/microlet/test/kubeletconfig/gatesrc"
)

const gatesFile = "../../internal/kubeletconfig/zz_generated_featuregates.go"

// TestFeatureGatesMatchUpstream pins microlet's table of the kubelet's
// feature gates to the kubelet's own gate: the committed file is what
// cmd/kubeletgates writes now, and the gate microlet builds from it holds
// the same gates, specs, dependencies and emulation version.
func TestFeatureGatesMatchUpstream(t *testing.T) {
	want, err := gatesrc.Source(utilfeature.DefaultMutableFeatureGate)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(gatesFile)
	if err != nil {
		t.Fatal(err)
	}
	const regen = "regenerate it: cd test/kubeletconfig && GOWORK=off go run ./cmd/kubeletgates > " + gatesFile
	if diff := cmp.Diff(string(want), string(file)); diff != "" {
		t.Errorf("%s differs from the kubelet's feature gate (-kubelet +file); %s\n%s", gatesFile, regen, diff)
	}
	g := ours.FeatureGate()
	built, err := gatesrc.Source(g)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(built)); diff != "" {
		t.Errorf("the gate built from the table differs from the kubelet's (-kubelet +microlet):\n%s", diff)
	}
	up := utilfeature.DefaultMutableFeatureGate
	if g.EmulationVersion().String() != up.EmulationVersion().String() || g.MinCompatibilityVersion().String() != up.MinCompatibilityVersion().String() {
		t.Errorf("emulation/min compatibility version %s/%s, the kubelet's %s/%s",
			g.EmulationVersion(), g.MinCompatibilityVersion(), up.EmulationVersion(), up.MinCompatibilityVersion())
	}
	// KnownFeatures: the help lines ("Name=true|false (BETA - default=true)").
	if diff := cmp.Diff(up.KnownFeatures(), g.KnownFeatures()); diff != "" {
		t.Errorf("known features differ (-kubelet +microlet):\n%s", diff)
	}
}
