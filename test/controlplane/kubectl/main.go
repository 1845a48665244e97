// Command kubectl is the upstream kubectl, built from the k8s.io/kubectl
// module at the version the pinned k8s.io/kubernetes requires, so tests and
// people drive the test control plane with the client of the same release.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
)

func main() {
	os.Exit(cli.Run(cmd.NewDefaultKubectlCommand()))
}
