// Command addons is the cluster add-ons' package by hand: `addons images`
// builds and imports every add-on image into the host's Docker and prints
// the names; `addons render --apiserver-host IP` prints the manifests.
//
//	go run ./test/cluster/addons/cmd/addons images
//	go run ./test/cluster/addons/cmd/addons render --apiserver-host 172.30.0.2 | kubectl apply -f -
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/test/cluster/addons"
)

func main() {
	root := &cobra.Command{Use: "addons", Short: "Build and render the test cluster's add-ons", SilenceUsage: true}
	root.AddCommand(&cobra.Command{
		Use:   "images",
		Short: "Build and docker-import every add-on image; print their names",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			repo, err := controlplane.RepoRoot()
			if err != nil {
				return err
			}
			ctx, cancel := signals.Context()
			defer cancel()
			names, err := addons.EnsureImages(ctx, repo, os.Stderr)
			for _, n := range names {
				fmt.Println(n)
			}
			return err
		},
	})
	v := addons.Values{APIServerPort: 6443, PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/16",
		ClusterDNS: "10.96.0.10", ClusterDomain: "cluster.local"}
	render := &cobra.Command{
		Use:   "render",
		Short: "Print every add-on's manifests",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			out, err := addons.Render(v)
			if err != nil {
				return err
			}
			_, err = os.Stdout.Write(out)
			return err
		},
	}
	f := render.Flags()
	f.StringVar(&v.APIServerHost, "apiserver-host", "", "the control plane's IP on the cluster network")
	f.IntVar(&v.APIServerPort, "apiserver-port", v.APIServerPort, "the API server's secure port")
	f.StringVar(&v.PodCIDR, "pod-cidr", v.PodCIDR, "the cluster's pod network")
	f.StringVar(&v.ServiceCIDR, "service-cidr", v.ServiceCIDR, "the Service ClusterIP range")
	f.StringVar(&v.ClusterDNS, "cluster-dns", v.ClusterDNS, "the kube-dns Service's ClusterIP")
	f.StringVar(&v.ClusterDomain, "cluster-domain", v.ClusterDomain, "the cluster's DNS domain")
	root.AddCommand(render)
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}
