package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/test/cluster"
	"github.com/microlet/microlet/test/conformance"
)

// full runs every [Conformance] spec on a make cluster cluster, in the
// parallel then the serial phase (conformance.FullPhases), each phase's
// junit file and output in results/<phase>/, both merged into
// results/junit_01.xml.
func full(ctx context.Context, args []string, out io.Writer) error {
	began := time.Now()
	fs := flag.NewFlagSet("full", flag.ContinueOnError)
	var imgs imageFlags
	imgs.register(fs)
	e2e := fs.String("e2e-test", "", "the suite binary (hack/build-e2e.sh e2e.test)")
	ginkgo := fs.String("ginkgo", "", "the ginkgo CLI (hack/build-e2e.sh ginkgo), for the parallel phase")
	procs := fs.Int("procs", 4, "parallel phase's processes")
	sampleAPIServer := fs.String("sample-apiserver", "", "static k8s.io/sample-apiserver (hack/build-e2e.sh sample-apiserver)")
	kubectl := fs.String("kubectl", "", "kubectl the suite shells out to (default: hack/build-kubectl.sh's)")
	focus := fs.String("focus", "", "run only these specs in the parallel phase, and no serial phase unless -serial-focus (default: the whole suite)")
	serialFocus := fs.String("serial-focus", "", "with -focus: the serial phase's specs")
	name := fs.String("cluster", "conformance", "the make cluster cluster's name (made, or reused when healthy)")
	workers := fs.Int("workers", 2, "worker nodes")
	agent := fs.String("agent", cluster.AgentMicrolet, "the nodes' agent: microlet, or kubelet (the upstream kubelet, the report's side column)")
	keep := fs.Bool("keep-cluster", false, "leave the cluster running at the end")
	results := fs.String("results", "_output/conformance-full", "results directory; emptied at start")
	record := fs.String("record", "", "keep each phase's trimmed junit file and meta.json in this directory (test/conformance/runs/full/<agent>)")
	reportPath := fs.String("report", "", "rewrite the Markdown report here with the recorded runs (docs/conformance.md)")
	reasonsPath := fs.String("reasons", "test/conformance/reasons.yaml", "failure reasons for the report")
	e2eVersion := fs.String("e2e-version", "", "the suite's version, for the report")
	dryRun := fs.Bool("dry-run", false, "list each phase's specs; start nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *e2e == "" || (*procs > 1 && *ginkgo == "") {
		return errors.New("-e2e-test and, for -procs > 1, -ginkgo are required (hack/build-e2e.sh)")
	}
	phases := conformance.FullPhases(*procs)
	if *focus != "" {
		phases[0].Focus = *focus
		if *serialFocus == "" {
			phases = phases[:1]
		}
	}
	if *serialFocus != "" {
		phases[1].Focus = *serialFocus
	}
	repo, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	resultsDir, err := filepath.Abs(*results)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(resultsDir); err != nil {
		return err
	}
	if err := os.MkdirAll(resultsDir, 0o755); err != nil {
		return err
	}
	if *kubectl == "" {
		if *kubectl, err = controlplane.FindKubectl(); err != nil {
			return err
		}
	}
	suite := func(p conformance.Phase) conformance.Suite {
		s := conformance.Suite{E2ETest: *e2e, Procs: p.Procs, Kubectl: *kubectl, Focus: p.Focus, Skip: p.Skip,
			ResultsDir: filepath.Join(resultsDir, p.Name), Timeout: 3 * time.Hour, DryRun: *dryRun, Out: out}
		if p.Procs > 1 {
			s.Ginkgo = *ginkgo
		}
		return s
	}
	if *dryRun {
		for _, p := range phases {
			s := suite(p)
			s.Kubeconfig = "/dev/null"
			if err := os.MkdirAll(s.ResultsDir, 0o755); err != nil {
				return err
			}
			fmt.Fprintf(out, "conformance: %s phase: %s\n", p.Name, strings.Join(s.Args(), " "))
			if _, err := s.Run(ctx); err != nil {
				return err
			}
		}
		return nil
	}

	step := func(format string, a ...any) {
		fmt.Fprintf(out, "conformance: %s: %s\n", time.Since(began).Round(time.Second), fmt.Sprintf(format, a...))
	}
	microletVersion := gitDescribe(repo)
	bins := filepath.Join(resultsDir, "bin")
	if err := goBuild(ctx, repo, bins, "", "github.com/microlet/microlet/services/runtime-shim/pause", conformance.BusyboxShPackage); err != nil {
		return err
	}
	if imgs.pause == "" {
		imgs.pause = filepath.Join(bins, "pause")
	}
	if imgs.busyboxSh == "" {
		imgs.busyboxSh = filepath.Join(bins, "busybox-sh")
	}
	step("building the test images")
	src, err := conformance.DefaultImageSources(ctx, imgs.agnhost, imgs.nonewprivs, imgs.pause, imgs.busyboxSh)
	if err != nil {
		return err
	}
	src.Busybox, src.Shell = imgs.busybox, imgs.shell
	if *sampleAPIServer != "" {
		if err := src.WithAggregator(*sampleAPIServer); err != nil {
			return err
		}
	}
	cfg := cluster.Config{Name: *name, Workers: *workers, RepoRoot: repo, Log: out, Agent: *agent}
	step("bringing up cluster %s (%d workers, %s nodes)", *name, *workers, *agent)
	cl, err := cluster.Up(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		saveClusterLogs(context.WithoutCancel(ctx), cl, filepath.Join(resultsDir, "nodes"))
		if !*keep {
			step("removing cluster %s", *name)
			if err := cluster.Down(context.WithoutCancel(ctx), cfg); err != nil {
				fmt.Fprintln(os.Stderr, "conformance: cluster down:", err)
			}
		}
	}()
	step("loading the test images into every node, and %s into the cluster registry %s", strings.Join(conformance.MirrorImages, ", "), cl.RegistryHost())
	if err := conformance.LoadClusterImages(ctx, cl, src, out); err != nil {
		return err
	}

	command := "make conformance SUITE=full"
	if *agent != cluster.AgentMicrolet {
		command += " NODE_AGENT=" + *agent
		microletVersion = ""
	}
	meta := conformance.Meta{
		Node: *agent, E2E: *e2eVersion, Microlet: microletVersion, Procs: *procs,
		Command: command, Kernel: commandOutput("uname", "-r"),
		Docker: "Docker " + commandOutput("docker", "version", "--format", "{{.Server.Version}}") + " (" + commandOutput("docker", "info", "--format", "{{.Driver}}") + ")",
		Cgroup: "cgroup v" + commandOutput("docker", "info", "--format", "{{.CgroupVersion}}"),
	}
	var runs []conformance.PhaseRun
	failed := false
	for _, p := range phases {
		s := suite(p)
		s.Kubeconfig = cl.Kubeconfig
		if err := os.MkdirAll(s.ResultsDir, 0o755); err != nil {
			return err
		}
		logf, err := os.Create(filepath.Join(s.ResultsDir, "e2e.log"))
		if err != nil {
			return err
		}
		s.Out = io.MultiWriter(out, logf)
		step("%s phase: %s", p.Name, strings.Join(s.Args(), " "))
		res, runErr := s.Run(ctx)
		_ = logf.Close()
		if runErr != nil {
			return fmt.Errorf("%s phase: %w", p.Name, runErr)
		}
		runs = append(runs, conformance.PhaseRun{Phase: p.Name, Run: res})
		step("%s phase: %d selected: %d passed, %d failed, %d skipped in %s", p.Name, len(res.Selected()),
			res.Count(conformance.Passed), res.Count(conformance.Failed), res.Count(conformance.Skipped), res.Duration.Round(time.Second))
		if res.Count(conformance.Failed) > 0 || len(res.SetupFailures()) > 0 {
			failed = true
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	meta.Wall = humanMinutes(time.Since(began))
	if err := writeJSON(filepath.Join(resultsDir, "meta.json"), meta); err != nil {
		return err
	}
	var files []string
	for _, r := range runs {
		files = append(files, filepath.Join(resultsDir, r.Phase, conformance.JUnitFile))
	}
	if err := conformance.MergeJUnit(filepath.Join(resultsDir, conformance.JUnitFile), files...); err != nil {
		return err
	}
	col := conformance.FullColumn{Name: meta.Node, Phases: runs, Meta: meta}
	sel := col.Selected()
	nFailed := 0
	for _, c := range sel {
		if c.Result == conformance.Failed {
			nFailed++
			fmt.Fprintf(out, "  FAILED %s\n", c.Name)
		}
	}
	fmt.Fprintf(out, "\nconformance: full suite: %d selected, %d failed; whole run %s; results in %s\n", len(sel), nFailed, time.Since(began).Round(time.Second), resultsDir)
	if *record != "" {
		for _, r := range runs {
			if err := os.MkdirAll(filepath.Join(*record, r.Phase), 0o755); err != nil {
				return err
			}
			if err := conformance.TrimJUnit(filepath.Join(resultsDir, r.Phase, conformance.JUnitFile), filepath.Join(*record, r.Phase, conformance.JUnitFile)); err != nil {
				return err
			}
		}
		if err := writeJSON(filepath.Join(*record, "meta.json"), meta); err != nil {
			return err
		}
		fmt.Fprintf(out, "conformance: run recorded in %s\n", *record)
	}
	if *reportPath != "" {
		nodeCols := recordedNodeColumns()
		if err := writeReport(*reportPath, *reasonsPath, conformance.NodePage(len(nodeCols)), nodeCols, recordedFullColumns()); err != nil {
			return err
		}
		fmt.Fprintf(out, "conformance: report written to %s\n", *reportPath)
	}
	if failed {
		return errFailed
	}
	return nil
}

// saveClusterLogs copies each node's logs (microlet's output, containerd's,
// the control plane's) into dir.
func saveClusterLogs(ctx context.Context, cl *cluster.Cluster, dir string) {
	_ = os.MkdirAll(dir, 0o755)
	for _, n := range cl.Nodes {
		if b, err := exec.CommandContext(ctx, "docker", "logs", n.Name).CombinedOutput(); err == nil {
			_ = os.WriteFile(filepath.Join(dir, n.Name+".log"), b, 0o644)
		}
		for _, f := range []string{"containerd.log", "controlplane.log"} {
			if b, err := exec.CommandContext(ctx, "docker", "exec", n.Name, "cat", "/var/log/"+f).Output(); err == nil {
				_ = os.WriteFile(filepath.Join(dir, n.Name+"-"+f), b, 0o644)
			}
		}
	}
}
