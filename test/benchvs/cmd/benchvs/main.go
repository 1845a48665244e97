// Command benchvs measures microlet and the upstream kubelet side by side
// (package benchvs) and writes docs/performance.md.
//
//	benchvs run -kubelet F [-agents microlet,kubelet] [-batches 10,30,100] [-idle 60s] [-steady-pods 110] [-steady 2m] [-churn 2m] [-churn-rate 5] [-runs D] [-report F]
//	benchvs report [-runs test/benchvs/runs] [-o docs/performance.md]
//
// run prints the tables and keeps the record in -runs; with -report it
// also writes the page from it. report writes the page from the newest
// record. make bench-vs-kubelet runs both.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/test/benchvs"
)

func main() {
	args := os.Args[1:]
	mode := ""
	if len(args) > 0 {
		mode, args = args[0], args[1:]
	}
	var err error
	switch mode {
	case "run":
		err = run(args, os.Stdout)
	case "report":
		err = report(args)
	default:
		err = fmt.Errorf("usage: benchvs run|report [flags] (got %q)", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchvs:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var o benchvs.Options
	fs.StringVar(&o.Kubelet, "kubelet", "", "the upstream kubelet binary (hack/build-kubelet.sh)")
	agents := fs.String("agents", "microlet,kubelet", "the agents to measure, in order")
	batches := fs.String("batches", "10,30", "sizes of the pod batches created at once (make bench-vs-kubelet adds 100)")
	fs.DurationVar(&o.IdleWindow, "idle", time.Minute, "idle window with no pods (and the baseline window with no agent)")
	fs.IntVar(&o.SteadyPods, "steady-pods", 110, "pods Running during the steady-state window (0: none)")
	fs.DurationVar(&o.SteadyWindow, "steady", 2*time.Minute, "steady-state window")
	fs.DurationVar(&o.ChurnWindow, "churn", 2*time.Minute, "churn window: pods created at -churn-rate, each deleted once Running (0: none)")
	fs.Float64Var(&o.ChurnRate, "churn-rate", 5, "pods created per second during the churn window")
	fs.StringVar(&o.Results, "results", "_output/benchvs", "binaries and the agents' logs")
	runs := fs.String("runs", "test/benchvs/runs", "keep the record here")
	reportPath := fs.String("report", "", "also write the page here (docs/performance.md)")
	fs.StringVar(&o.Command, "command", "benchvs run "+strings.Join(args, " "), "how the run was made, for the record")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Agents = strings.Split(*agents, ",")
	for _, s := range strings.Split(*batches, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return fmt.Errorf("-batches: %q is not a positive count", s)
		}
		o.Batches = append(o.Batches, n)
	}
	if o.IdleWindow <= 0 {
		return errors.New("-idle must be positive")
	}
	if o.ChurnWindow < 0 {
		return fmt.Errorf("-churn %s: want a duration of 0 (no churn) or more", o.ChurnWindow)
	}
	if o.ChurnWindow > 0 && (o.ChurnRate <= 0 || o.ChurnRate*o.ChurnWindow.Seconds() < 1) {
		return fmt.Errorf("-churn-rate %g for -churn %s: want a positive rate that creates at least one pod", o.ChurnRate, o.ChurnWindow)
	}
	o.Out = out
	ctx, cancel := signals.Context()
	defer cancel()
	rec, err := benchvs.Run(ctx, o)
	if err != nil {
		return err
	}
	path, err := benchvs.Save(*runs, rec)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	benchvs.WriteTables(out, rec)
	fmt.Fprintf(out, "benchvs: record in %s\n", path)
	if *reportPath != "" {
		if err := writePage(*reportPath, rec, path); err != nil {
			return err
		}
		fmt.Fprintf(out, "benchvs: page written to %s\n", *reportPath)
	}
	return nil
}

func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	runs := fs.String("runs", "test/benchvs/runs", "the recorded runs; the newest is used")
	outPath := fs.String("o", "docs/performance.md", "the page to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	path, err := benchvs.Newest(*runs)
	if err != nil {
		return err
	}
	rec, err := benchvs.ReadRecord(path)
	if err != nil {
		return err
	}
	return writePage(*outPath, rec, path)
}

func writePage(path string, rec *benchvs.Record, source string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	benchvs.WritePage(f, rec, source)
	return f.Close()
}
