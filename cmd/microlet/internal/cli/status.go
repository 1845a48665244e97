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
	"github.com/microlet/microlet/internal/procinfo"
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
	processUsage
}

// processUsage is what a process costs, read from /proc by the CLI (so it
// needs to run on the node, as root or as the services' user). CPU is in
// seconds since the process started, or in cores over --sample; memory in
// bytes, PSS from smaps_rollup.
type processUsage struct {
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	CPUCores   float64 `json:"cpu_cores,omitempty"`
	RSSBytes   uint64  `json:"rss_bytes,omitempty"`
	PSSBytes   uint64  `json:"pss_bytes,omitempty"`
}

// statusReport is `microlet status -o json`.
type statusReport struct {
	// Supervised is true when a `microlet run` answered; false when the
	// sockets were probed directly.
	Supervised bool        `json:"supervised"`
	Components []statusRow `json:"components"`
	// Supervisor is the `microlet run` process itself (-o wide and json,
	// when one answers).
	Supervisor *statusRow `json:"supervisor,omitempty"`
	// Total sums the usage of the components and the supervisor.
	Total *processUsage `json:"total,omitempty"`
	// SampleSeconds is the window CPUCores was measured over (--sample).
	SampleSeconds float64 `json:"sample_seconds,omitempty"`
}

func newStatusCmd(stdout, stderr io.Writer) *cobra.Command {
	var runDir, output string
	var timeout, sample time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "show each service's health, pid, restarts and uptime (-o wide: CPU and memory)",
		Long: `status asks the supervisor (microlet run) on <run-dir>/microlet.sock; when no
supervisor runs (systemd or compose deployments) it probes each service's
socket directly, and RESTARTS is unknown.

-o wide (and json) adds what each process costs, read from /proc/<pid>: CPU
time, RSS and PSS (smaps_rollup: shared pages divided among the processes
mapping them, so PSS sums to the memory the stack really occupies), plus the
supervisor's own row and a TOTAL. With --sample 30s CPU is the average in
cores over that window instead of the seconds since start.`,
		Args: argsExactly(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "", "table", "wide", "json":
			default:
				return badUsage(fmt.Errorf("--output %q: want table, wide or json", output))
			}
			if sample < 0 {
				return badUsage(fmt.Errorf("--sample %s: want a positive window", sample))
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			rep, err := collectStatus(ctx, runDir)
			if err != nil {
				return err
			}
			if output == "wide" || output == "json" {
				if err := measure(cmd.Context(), rep, runDir, sample); err != nil {
					return err
				}
			}
			if !rep.Supervised && output != "json" {
				fmt.Fprintf(stderr, "no supervisor answers on %s; probed the service sockets directly\n", components.SocketPath(runDir, components.Supervisor))
			}
			if output == "json" {
				enc := json.NewEncoder(stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printStatus(stdout, rep, output == "wide")
			return nil
		},
	}
	addRunDir(cmd.Flags(), &runDir)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, wide (with CPU and memory) or json")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answers")
	cmd.Flags().DurationVar(&sample, "sample", 0, "with -o wide or json: report CPU in cores averaged over this window (0: CPU seconds since start)")
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

// measure fills in each process's usage (and the supervisor's row and the
// total); with sample > 0 CPU becomes cores over that window.
func measure(ctx context.Context, rep *statusReport, runDir string, sample time.Duration) error {
	rows := make([]*statusRow, 0, len(rep.Components)+1)
	for i := range rep.Components {
		rows = append(rows, &rep.Components[i])
	}
	if rep.Supervised {
		sock := components.SocketPath(runDir, components.Supervisor)
		sup := &statusRow{Name: components.Supervisor, Health: "SERVING", Restarts: -1, Socket: sock, PID: probe.PeerPID("unix://" + sock)}
		if t := probe.StartTime(sup.PID); !t.IsZero() {
			sup.StartedAt = &t
			sup.UptimeSeconds = time.Since(t).Seconds()
		}
		rep.Supervisor = sup
		rows = append(rows, sup)
	}
	before := make([]float64, len(rows))
	start := time.Now()
	for i, r := range rows {
		if r.PID > 0 {
			if u, err := procinfo.Of(r.PID); err == nil {
				before[i] = u.CPUSeconds
			}
		}
	}
	if sample > 0 {
		select {
		case <-ctx.Done():
			return failure("--sample: %v", ctx.Err())
		case <-time.After(sample):
		}
		rep.SampleSeconds = time.Since(start).Seconds()
	}
	total := &processUsage{}
	for i, r := range rows {
		if r.PID <= 0 {
			continue
		}
		u, err := procinfo.Of(r.PID)
		if err != nil {
			continue // gone, or not ours to read
		}
		r.CPUSeconds, r.RSSBytes, r.PSSBytes = u.CPUSeconds, u.RSS, u.PSS
		if sample > 0 {
			r.CPUCores = (u.CPUSeconds - before[i]) / rep.SampleSeconds
		}
		total.CPUSeconds += r.CPUSeconds
		total.CPUCores += r.CPUCores
		total.RSSBytes += r.RSSBytes
		total.PSSBytes += r.PSSBytes
	}
	rep.Total = total
	return nil
}

func printStatus(w io.Writer, rep *statusReport, wide bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if wide {
		cpu := "CPU(s)"
		if rep.SampleSeconds > 0 {
			cpu = "CPU(cores)"
		}
		fmt.Fprintf(tw, "NAME\tHEALTH\tPID\tRESTARTS\tUPTIME\t%s\tRSS(MiB)\tPSS(MiB)\tSOCKET\n", cpu)
	} else {
		fmt.Fprintln(tw, "NAME\tHEALTH\tPID\tRESTARTS\tUPTIME\tSOCKET")
	}
	rows := rep.Components
	if wide && rep.Supervisor != nil {
		rows = append(rows[:len(rows):len(rows)], *rep.Supervisor)
	}
	for _, r := range rows {
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
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Health, pid, restarts, uptime, usageColumns(r.processUsage, rep.SampleSeconds > 0), sock)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Health, pid, restarts, uptime, sock)
		}
	}
	if wide && rep.Total != nil {
		fmt.Fprintf(tw, "TOTAL\t\t\t\t\t%s\t\n", usageColumns(*rep.Total, rep.SampleSeconds > 0))
	}
	_ = tw.Flush()
}

// usageColumns is the CPU, RSS and PSS cells of a wide row ("-" when not
// measured).
func usageColumns(u processUsage, cores bool) string {
	if u.RSSBytes == 0 {
		return "-\t-\t-"
	}
	cpu := fmt.Sprintf("%.1f", u.CPUSeconds)
	if cores {
		cpu = fmt.Sprintf("%.3f", u.CPUCores)
	}
	pss := "-"
	if u.PSSBytes > 0 {
		pss = fmt.Sprintf("%.1f", float64(u.PSSBytes)/(1<<20))
	}
	return fmt.Sprintf("%s\t%.1f\t%s", cpu, float64(u.RSSBytes)/(1<<20), pss)
}
