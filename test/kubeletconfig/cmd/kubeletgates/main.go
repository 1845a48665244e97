// Command kubeletgates prints internal/kubeletconfig/zz_generated_featuregates.go:
// every feature gate the kubelet (k8s.io/kubernetes v1.36.3) knows, with its
// versioned specs, and the gates' dependencies, read from the kubelet's own
// feature gate after the kubelet's packages registered theirs (the
// Kubernetes, client-go, apiserver, zpages, metrics and logging gates).
// TestFeatureGatesMatchUpstream fails when the committed file differs.
package main

import (
	"fmt"
	"os"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	// The kubelet's command: importing it runs the init functions that
	// register gates with the kubelet's feature gate, as in the kubelet.
	_ "k8s.io/kubernetes/cmd/kubelet/app"

	"github.com/microlet/microlet/test/kubeletconfig/gatesrc"
)

func main() {
	src, err := gatesrc.Source(utilfeature.DefaultMutableFeatureGate)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(src)
}
