// Command kube-scheduler is the upstream scheduler, built from the pinned
// k8s.io/kubernetes module so the test control plane and the dev box place
// pods on nodes the way a real cluster does.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
