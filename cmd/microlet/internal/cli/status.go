package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/microlet/microlet/cmd/microlet/internal/probe"
	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/socket"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// statusRow is one service in `microlet status`; it is also the JSON shape.
type statusRow struct {
	Name   string `json:"name"`
	Health string `json:"health"`
	PID    int    `json:"pid"`
	// Restarts is -1 when unknown (no supervisor).
	Restarts      int        `json:"restarts"`
	StartedAt     *time.Time `json:"started_at,omitempty"`
	UptimeSeconds float64    `json:"uptime_seconds"`
	Socket        string     `json:"socket"`
	External      bool       `json:"external,omitempty"`
	LastExit      string     `json:"last_exit,omitempty"`
}

// statusReport is `microlet status -o json`.
type statusReport struct {
	// Supervised is true when a `microlet run` answered; false when the
	// sockets were probed directly.
	Supervised bool        `json:"supervised"`
	Components []statusRow `json:"components"`
}

func newStatusCmd(stdout, stderr io.Writer) *cobra.Command {
	var runDir, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show each service's health, pid, restarts and uptime",
		Long: `status asks the supervisor (microlet run) on <run-dir>/microlet.sock; when no
supervisor runs (systemd or compose deployments) it probes each service's
socket directly, and RESTARTS is unknown.`,
		Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" && output != "table" {
				return badUsage(fmt.Errorf("--output %q: want table or json", output))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep, err := collectStatus(ctx, runDir)
			if err != nil {
				return err
			}
			if !rep.Supervised && output != "json" {
				fmt.Fprintf(stderr, "no supervisor answers on %s; probed the service sockets directly\n", components.SocketPath(runDir, components.Supervisor))
			}
			if output == "json" {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printStatus(stdout, rep)
			return nil
		},
	}
	addRunDir(cmd.Flags(), &runDir)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answers")
	return cmd
}

func collectStatus(ctx context.Context, runDir string) (*statusReport, error) {
	if err := socket.CheckPath(components.SocketPath(runDir, components.NodeStatusd)); err != nil {
		return nil, badUsage(fmt.Errorf("--run-dir: %w", err))
	}
	supSock := components.SocketPath(runDir, components.Supervisor)
	if socket.Alive(supSock) {
		cc, err := grpcclient.Dial(supSock)
		if err != nil {
			return nil, failure("%v", err)
		}
		defer func() { _ = cc.Close() }()
		resp, err := supervisorv1.NewSupervisorServiceClient(cc).ListComponents(ctx, &supervisorv1.ListComponentsRequest{})
		if err != nil {
			return nil, failure("supervisor at %s: %v", supSock, err)
		}
		rep := &statusReport{Supervised: true}
		now := time.Now()
		for _, c := range resp.GetComponents() {
			row := statusRow{
				Name:     c.GetName(),
				Health:   probe.String(c.GetHealth()),
				PID:      int(c.GetPid()),
				Restarts: int(c.GetRestarts()),
				Socket:   endpointPath(c.GetEndpoint()),
				External: c.GetExternal(),
				LastExit: c.GetLastExit(),
			}
			if c.GetStartedAt() != nil && c.GetPid() != 0 {
				t := c.GetStartedAt().AsTime()
				row.StartedAt = &t
				row.UptimeSeconds = now.Sub(t).Seconds()
			}
			rep.Components = append(rep.Components, row)
		}
		return rep, nil
	}
	rep := &statusReport{Components: make([]statusRow, len(components.All))}
	var wg sync.WaitGroup
	now := time.Now()
	for i, comp := range components.All {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep := components.Endpoint(runDir, comp.Name)
			row := statusRow{Name: comp.Name, Restarts: -1, Socket: endpointPath(ep)}
			row.Health = probe.String(probe.Health(ctx, ep).Health)
			if row.Health != "DOWN" {
				row.PID = probe.PeerPID(ep)
				if t := probe.StartTime(row.PID); !t.IsZero() {
					row.StartedAt = &t
					row.UptimeSeconds = now.Sub(t).Seconds()
				}
			}
			rep.Components[i] = row
		}()
	}
	wg.Wait()
	return rep, nil
}

func endpointPath(ep string) string {
	if p, err := socket.PathFromEndpoint(ep); err == nil {
		return p
	}
	return ep
}

func printStatus(w io.Writer, rep *statusReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHEALTH\tPID\tRESTARTS\tUPTIME\tSOCKET")
	for _, r := range rep.Components {
		pid, restarts, uptime := "-", "-", "-"
		if r.PID > 0 {
			pid = strconv.Itoa(r.PID)
		}
		if r.Restarts >= 0 && !r.External {
			restarts = strconv.Itoa(r.Restarts)
		}
		if r.StartedAt != nil {
			uptime = duration.HumanDuration(time.Duration(r.UptimeSeconds * float64(time.Second)))
		}
		sock := r.Socket
		if r.External {
			sock += " (external)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Health, pid, restarts, uptime, sock)
	}
	_ = tw.Flush()
}
