package conformance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// fastSpecs are a handful of upstream specs that pass on microlet and
// finish in seconds each: pod lifecycle, logs, exec, ConfigMap and Secret
// volumes, a probe. `make test` runs them so they stay green; `make
// conformance` runs the whole selection.
var fastSpecs = []string{
	"[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]",
	"[sig-node] Kubelet when scheduling a busybox command in a pod should print the output to logs [NodeConformance] [Conformance]",
	"[sig-node] Pods should support remote command execution over websockets [NodeConformance] [Conformance]",
	"[sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] [Conformance]",
	"[sig-storage] Secrets should be consumable from pods in volume [NodeConformance] [Conformance]",
	"[sig-node] Probing container with readiness probe that fails should never be ready and never restart [NodeConformance] [Conformance]",
}

// requireBuilt returns find's binary, skipping the test when it is missing
// unless MICROLET_REQUIRE_CONTROLPLANE=1 asks for every dependency.
func requireBuilt(t *testing.T, what string, find func() (string, error)) string {
	t.Helper()
	p, err := find()
	if err != nil {
		if errors.Is(err, controlplane.ErrMissingBinary) {
			testenv.RequireOrSkip(t, "no %s: %v", what, err)
		}
		t.Fatalf("%s: %v", what, err)
	}
	return p
}

// TestUpstreamSubset runs fastSpecs from Kubernetes' own e2e.test against
// the full test control plane and one microlet node, exactly as `make
// conformance` does, and requires each to pass.
func TestUpstreamSubset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster and the upstream suite")
	}
	e2eTest := requireBuilt(t, "e2e.test", FindE2ETest)
	agnhost := requireBuilt(t, "agnhost", FindAgnhost)
	nonewprivs := requireBuilt(t, "nonewprivs", FindNonewprivs)
	cp := controlplane.GetFull(t)
	kubectl := controlplane.Kubectl(t)
	bins := testenv.Build(t, nil, append(node.Packages(), "github.com/microlet/microlet/services/runtime-shim/pause", BusyboxShPackage)...)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	src, err := DefaultImageSources(ctx, agnhost, nonewprivs, filepath.Join(bins, "pause"), filepath.Join(bins, "busybox-sh"))
	if err != nil {
		t.Fatal(err)
	}
	var log testenv.LockedBuffer
	if err := PrepareImages(ctx, src, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var nodeOut testenv.LockedBuffer
	n, err := StartNode(ctx, cp, NodeOptions{Bins: bins, Out: &nodeOut})
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(nodeOut.String(), 20000))
	}
	t.Cleanup(func() {
		n.Stop()
		if t.Failed() {
			t.Logf("microlet output (tail):\n%s", tail(nodeOut.String(), 40000))
		}
	})

	var suiteOut testenv.LockedBuffer
	suite := Suite{
		E2ETest: e2eTest, Kubeconfig: cp.AdminKubeconfig(), Kubectl: kubectl,
		Focus: focusOn(fastSpecs), Skip: DefaultSkip,
		ResultsDir: t.TempDir(), Timeout: 20 * time.Minute, Out: &suiteOut,
	}
	run, err := suite.Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(suiteOut.String(), 40000))
	}
	for _, c := range run.SetupFailures() {
		t.Errorf("suite setup %s failed: %s", c.Name, c.Message)
	}
	requirePassed(t, run, fastSpecs)
	if t.Failed() {
		t.Logf("suite output (tail):\n%s", tail(suiteOut.String(), 40000))
	}
}

// requirePassed fails t unless run selected exactly specs and each passed.
func requirePassed(t *testing.T, run *Run, specs []string) {
	t.Helper()
	for _, c := range run.SetupFailures() {
		t.Errorf("suite setup %s failed: %s", c.Name, c.Message)
	}
	got := map[string]Case{}
	for _, c := range run.Selected() {
		got[c.Name] = c
	}
	for _, name := range specs {
		c, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: not run (renamed upstream?)", name)
		case c.Result != Passed:
			t.Errorf("%s: %s after %s: %s", name, c.Result, c.Duration.Round(time.Second), c.Message)
		default:
			t.Logf("%s: passed in %s", name, c.Duration.Round(100*time.Millisecond))
		}
	}
	if len(got) != len(specs) {
		t.Errorf("the focus selected %d specs, want %d", len(got), len(specs))
	}
}

// focusOn is a Ginkgo focus selecting exactly specs.
func focusOn(specs []string) string {
	quoted := make([]string, len(specs))
	for i, s := range specs {
		quoted[i] = regexp.QuoteMeta(s)
	}
	return strings.Join(quoted, "|")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
