// Command kube-proxy is the upstream kube-proxy, built from the pinned
// k8s.io/kubernetes module for the test cluster's kube-proxy add-on
// (test/cluster/addons; hack/build-kube-proxy.sh). It runs in iptables
// mode as a DaemonSet on every node.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
