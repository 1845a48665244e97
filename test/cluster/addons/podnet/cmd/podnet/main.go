// Command podnet is the test cluster's pod network agent (package
// test/cluster/addons/podnet), run by the podnet DaemonSet on every node.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/internal/version"
	"github.com/microlet/microlet/test/cluster/addons/podnet"
)

func main() {
	var cfg podnet.Config
	kubeconfig := kubeclient.InCluster
	cmd := &cobra.Command{
		Use:           "podnet",
		Short:         "Pod network agent: CNI conflist, routes to other nodes' pod CIDRs, masquerade",
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, _, err := kubeclient.Clientset(kubeconfig, "podnet", 5, 10)
			if err != nil {
				return err
			}
			a, err := podnet.New(cfg, client)
			if err != nil {
				return err
			}
			ctx, cancel := signals.Context()
			defer cancel()
			return a.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "this node's Node name")
	f.StringVar(&cfg.ClusterCIDR, "cluster-cidr", "10.244.0.0/16", "the cluster's pod network")
	f.StringVar(&cfg.CNIConfDir, "cni-conf-dir", "/etc/cni/net.d", "where the CNI conflist is written")
	f.DurationVar(&cfg.Resync, "resync", 0, "re-apply everything this often without Node events (0: 1m)")
	f.StringVar(&kubeconfig, "kubeconfig", kubeconfig, `kubeconfig file, or "`+kubeclient.InCluster+`" for the pod's service account (KUBERNETES_SERVICE_HOST/PORT)`)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "podnet:", err)
		os.Exit(1)
	}
}
