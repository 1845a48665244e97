package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/microlet/microlet/cmd/microlet/internal/probe"
	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/socket"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

func newHealthCmd(stdout io.Writer) *cobra.Command {
	var runDir string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "health NAME|ENDPOINT",
		Short: "exit 0 only when the service answers SERVING (for healthchecks)",
		Long: `health asks one service's grpc.health.v1 once. NAME is a service name
(podconfig, statusd, nodestatusd, cloudsyncd, runtime-shim, podsyncd, microlet)
whose socket is in --run-dir; ENDPOINT is unix:///path or a socket path.
Exit status: 0 SERVING, 1 NOT_SERVING or DOWN, 2 bad arguments.`,
		Args: argsExactly(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ep, err := healthTarget(runDir, args[0])
			if err != nil {
				return badUsage(err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			r := probe.Health(ctx, ep)
			if r.Health != supervisorv1.Health_HEALTH_SERVING {
				return failure("%s: %s (%v)", args[0], probe.String(r.Health), r.Err)
			}
			fmt.Fprintf(stdout, "%s: SERVING\n", args[0])
			return nil
		},
	}
	addRunDir(cmd.Flags(), &runDir)
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

func healthTarget(runDir, arg string) (string, error) {
	if _, err := components.Get(arg); err == nil {
		ep := components.Endpoint(runDir, arg)
		p, _ := socket.PathFromEndpoint(ep)
		if err := socket.CheckPath(p); err != nil {
			return "", fmt.Errorf("--run-dir: %w", err)
		}
		return ep, nil
	}
	if strings.HasPrefix(arg, "unix:") || strings.Contains(arg, "/") {
		p, err := socket.PathFromEndpoint(arg)
		if err != nil {
			return "", err
		}
		if err := socket.CheckPath(p); err != nil {
			return "", err
		}
		return socket.Endpoint(p), nil
	}
	names := []string{}
	for _, c := range components.All {
		names = append(names, c.Name)
	}
	return "", fmt.Errorf("unknown service %q: want one of %s, %s, or a unix:// endpoint", arg, strings.Join(names, ", "), components.Supervisor)
}
