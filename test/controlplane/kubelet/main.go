// Command kubelet is the upstream kubelet, built from the pinned
// k8s.io/kubernetes module for the conformance harness's second column:
// the same e2e suite with the upstream kubelet as the node and
// runtime-shim as its CRI endpoint (hack/conformance.sh RUNTIME_ONLY=1).
// Nothing else builds or runs it.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
