// Command cluster is `make cluster` (up), `make cluster-down` (down) and
// `make cluster-load` (load); in the control-plane node it runs the
// control plane (controlplane) and the cluster registry (registry). See package cluster and docs/cluster.md.
//
//	cluster up [-name N] [-workers 2] [-agent microlet|kubelet]
//	cluster down [-name N]
//	cluster load [-name N] IMAGE...
//	cluster controlplane -shared DIR -ip IP
//	cluster registry -addr IP:PORT
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/test/cluster"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cluster up|down|load|controlplane|registry [flags]")
		os.Exit(2)
	}
	ctx, stop := signals.Context()
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, mode string, args []string) error {
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	var cfg cluster.Config
	fs.StringVar(&cfg.Name, "name", "microlet", "cluster name: prefix of its containers, network and volumes")
	switch mode {
	case "up":
		fs.IntVar(&cfg.Workers, "workers", 2, fmt.Sprintf("worker nodes besides the control-plane node (1-%d)", cluster.MaxWorkers))
		fs.StringVar(&cfg.Agent, "agent", cluster.AgentMicrolet, "every node's node agent: microlet, or kubelet (the upstream kubelet from the same configuration)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		cl, err := cluster.Up(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("\ncluster %s is up: %d nodes on %s (network %s)\n", cl.Name, len(cl.Nodes), cl.Subnet, cl.Network)
		for _, n := range cl.Nodes {
			fmt.Printf("  %-28s %-15s %s   shell: docker exec -it %s bash\n", n.Name, n.IP, n.Role, n.Name)
		}
		fmt.Printf("\nexport KUBECONFIG=%s\n", cl.Kubeconfig)
		return nil
	case "down":
		if err := fs.Parse(args); err != nil {
			return err
		}
		return cluster.Down(ctx, cfg)
	case "load":
		if err := fs.Parse(args); err != nil {
			return err
		}
		return cluster.Load(ctx, cfg, fs.Args()...)
	case "controlplane":
		shared := fs.String("shared", "/cluster", "directory the credentials are written to")
		ip := fs.String("ip", "", "the control-plane node's address on the cluster network")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *ip == "" {
			return fmt.Errorf("controlplane: -ip is required")
		}
		return cluster.RunControlPlane(ctx, *shared, *ip)
	case "registry":
		addr := fs.String("addr", "", "host:port to serve the cluster registry on")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *addr == "" {
			return fmt.Errorf("registry: -addr is required")
		}
		return registry.Serve(ctx, *addr)
	default:
		return fmt.Errorf("unknown mode %q (want up, down, load, controlplane or registry)", mode)
	}
}
