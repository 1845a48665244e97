// Command kube-controller-manager is the upstream controller manager, built
// from the pinned k8s.io/kubernetes module so the test control plane and the
// dev box run the cluster's controllers (service accounts, workloads,
// garbage collection, CSR signing, namespaces) without downloading a binary.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
