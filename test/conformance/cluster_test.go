package conformance

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/test/cluster"
)

// clusterSpecs are full-suite specs that need a whole cluster: a Service
// across nodes through kube-proxy, cluster DNS through CoreDNS, and an
// admission webhook the API server reaches through its Service. `make
// test` runs them on a make cluster cluster, as `make conformance
// SUITE=full` does.
var clusterSpecs = []string{
	"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
	"[sig-network] DNS should provide DNS for services [Conformance]",
	"[sig-api-machinery] AdmissionWebhook [Privileged:ClusterAdmin] should be able to deny pod and configmap creation [Conformance]",
}

// TestClusterSubset brings up a two-worker make cluster cluster of
// microlet nodes, loads the test images into it and requires clusterSpecs
// to pass.
func TestClusterSubset(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster and the upstream suite")
	}
	e2eTest := requireBuilt(t, "e2e.test", FindE2ETest)
	agnhost := requireBuilt(t, "agnhost", FindAgnhost)
	nonewprivs := requireBuilt(t, "nonewprivs", FindNonewprivs)
	kubectl := controlplane.Kubectl(t)
	bins := testenv.Build(t, nil, "github.com/microlet/microlet/services/runtime-shim/pause", BusyboxShPackage)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()

	var log testenv.LockedBuffer
	cfg := cluster.Config{Name: "mlconf-subset", Workers: 2, Log: &log}
	t.Cleanup(func() {
		if err := cluster.Down(context.Background(), cfg); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	cl, err := cluster.Up(ctx, cfg)
	if err != nil {
		t.Fatalf("cluster up: %v\n%s", err, tail(log.String(), 20000))
	}
	src, err := DefaultImageSources(ctx, agnhost, nonewprivs, filepath.Join(bins, "pause"), filepath.Join(bins, "busybox-sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadClusterImages(ctx, cl, src, &log); err != nil {
		t.Fatalf("%v\n%s", err, tail(log.String(), 20000))
	}
	var suiteOut testenv.LockedBuffer
	suite := Suite{
		E2ETest: e2eTest, Kubeconfig: cl.Kubeconfig, Kubectl: kubectl,
		Focus: focusOn(clusterSpecs), Skip: ParallelSkip,
		ResultsDir: t.TempDir(), Timeout: 20 * time.Minute, Out: &suiteOut,
	}
	run, err := suite.Run(ctx)
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(suiteOut.String(), 40000))
	}
	requirePassed(t, run, clusterSpecs)
	if t.Failed() {
		t.Logf("suite output (tail):\n%s", tail(suiteOut.String(), 40000))
	}
}
