// Command conformance runs Kubernetes' own end-to-end suite against a
// cluster whose only node is microlet, and writes the report.
//
//	conformance run -e2e-test F -agnhost F -nonewprivs F [-ginkgo F -procs N] [-focus RE] [-skip RE] [-results D] [-report docs/conformance.md]
//	conformance run -e2e-node-test F -agnhost F -nonewprivs F [...] [-focus-file RE] [-skip-file RE]
//	conformance report -junit [NAME=]FILE [-junit ...] [-reasons F] [-o FILE]
//	conformance images -agnhost F -nonewprivs F
//
// run builds microlet (go build, into the results directory), imports the
// test images offline (conformance.PrepareImages), starts etcd,
// kube-apiserver, kube-scheduler and kube-controller-manager
// (internal/testenv/controlplane) and one microlet node, runs e2e.test
// (serially, or in parallel through the ginkgo CLI), prints passed, failed
// and skipped, keeps the junit file, the suite's output, microlet's and the
// control plane's logs in the results directory and, with -report, writes
// the Markdown report. With -e2e-node-test it runs the kubelet's own node
// suite (e2e_node.test) instead, against the same node given a static pod
// directory and a cluster domain, and writes that suite's page
// (docs/conformance-e2enode.md). It exits 1 when a selected spec failed. report
// writes the Markdown report from junit files alone; images only imports
// the images. hack/conformance.sh builds the inputs and calls run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/signals"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
	"github.com/microlet/microlet/test/conformance"
)

// errFailed is returned by run when the suite ran and a spec failed.
var errFailed = errors.New("specs failed")

func main() {
	args := os.Args[1:]
	mode := ""
	if len(args) > 0 {
		mode, args = args[0], args[1:]
	}
	ctx, cancel := signals.Context()
	defer cancel()
	var err error
	switch mode {
	case "run":
		err = run(ctx, args, os.Stdout)
	case "report":
		err = report(args)
	case "images":
		err = images(ctx, args, os.Stdout)
	case "full":
		err = full(ctx, args, os.Stdout)
	default:
		err = fmt.Errorf("usage: conformance run|full|report|images [flags] (got %q)", mode)
	}
	switch {
	case errors.Is(err, errFailed):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "conformance:", err)
		os.Exit(2)
	}
}

// imageFlags are the inputs of the images.
type imageFlags struct {
	agnhost, nonewprivs, busybox, shell, busyboxSh, pause string
}

func (f *imageFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.agnhost, "agnhost", "", "static agnhost binary (hack/build-e2e.sh agnhost)")
	fs.StringVar(&f.nonewprivs, "nonewprivs", "", "static nonewprivs program (hack/build-e2e.sh nonewprivs)")
	fs.StringVar(&f.busybox, "busybox", "/bin/busybox", "static busybox (Debian's busybox-static)")
	fs.StringVar(&f.shell, "shell", "/bin/bash-static", "static shell that is the busybox image's sh (Debian's bash-static; empty: busybox's ash)")
	fs.StringVar(&f.pause, "pause", "", "static pause program (default: built with the node's binaries)")
	fs.StringVar(&f.busyboxSh, "busybox-sh", "", "the busybox image's /bin/sh, cmd/busybox-sh (default: built with the node's binaries)")
}

// prepare imports the images and returns what they were made of.
func (f *imageFlags) prepare(ctx context.Context, log io.Writer) (conformance.ImageSources, error) {
	src, err := conformance.DefaultImageSources(ctx, f.agnhost, f.nonewprivs, f.pause, f.busyboxSh)
	if err != nil {
		return src, fmt.Errorf("%w (-agnhost, -nonewprivs, -pause, -busybox-sh)", err)
	}
	src.Busybox, src.Shell = f.busybox, f.shell
	if f.shell == "" {
		src.ShellSwitch = ""
	}
	return src, conformance.PrepareImages(ctx, src, log)
}

func images(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("images", flag.ContinueOnError)
	var imgs imageFlags
	imgs.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	repo, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	if imgs.pause == "" || imgs.busyboxSh == "" {
		dir, err := os.MkdirTemp("", "conformance-pause")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }()
		if err := goBuild(ctx, repo, dir, "", "./services/runtime-shim/pause", conformance.BusyboxShPackage); err != nil {
			return err
		}
		if imgs.pause == "" {
			imgs.pause = filepath.Join(dir, "pause")
		}
		if imgs.busyboxSh == "" {
			imgs.busyboxSh = filepath.Join(dir, "busybox-sh")
		}
	}
	_, err = imgs.prepare(ctx, out)
	return err
}

func run(ctx context.Context, args []string, out io.Writer) error {
	began := time.Now()
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var imgs imageFlags
	imgs.register(fs)
	suite := conformance.Suite{Out: out}
	fs.StringVar(&suite.E2ETest, "e2e-test", "", "the suite binary (hack/build-e2e.sh e2e.test)")
	e2eNodeTest := fs.String("e2e-node-test", "", "run the kubelet's node suite, this e2e_node.test (hack/build-e2e.sh e2e_node.test), instead of -e2e-test")
	fs.StringVar(&suite.FocusFile, "focus-file", "", "only specs defined in files matching this (Ginkgo --focus-file; with -e2e-node-test default conformance.E2ENodeFocusFile)")
	fs.StringVar(&suite.SkipFile, "skip-file", "", "leave out specs defined in files matching this (Ginkgo --skip-file)")
	fs.StringVar(&suite.Ginkgo, "ginkgo", "", "the ginkgo CLI (hack/build-e2e.sh ginkgo), for -procs > 1")
	fs.IntVar(&suite.Procs, "procs", 1, "parallel suite processes (needs -ginkgo)")
	fs.StringVar(&suite.Kubectl, "kubectl", "", "kubectl the suite shells out to (default: hack/build-kubectl.sh's)")
	fs.StringVar(&suite.Focus, "focus", conformance.DefaultFocus, "specs to run (regular expression; with -e2e-node-test default conformance.E2ENodeFocus)")
	fs.StringVar(&suite.Skip, "skip", conformance.DefaultSkip, "specs to leave out (regular expression; with -e2e-node-test default conformance.E2ENodeSkip)")
	fs.DurationVar(&suite.Timeout, "timeout", 3*time.Hour, "limit of the whole suite")
	fs.BoolVar(&suite.DryRun, "dry-run", false, "list the selected specs; start nothing")
	results := fs.String("results", "_output/conformance", "results directory (junit, logs); emptied at start")
	reportPath := fs.String("report", "", "also write the Markdown report here (e.g. docs/conformance.md)")
	reasonsPath := fs.String("reasons", "test/conformance/reasons.yaml", "failure reasons for the report")
	nodeName := fs.String("node-name", "", "the node's name (default microlet-<random>)")
	e2eVersion := fs.String("e2e-version", "", "the suite's version, for the report")
	kubelet := fs.String("kubelet", "", "run the upstream kubelet (this binary, hack/build-kubelet.sh) on runtime-shim as the node instead of microlet")
	otherColumns := fs.String("other-junit", "", "[NAME=]FILE of another run to put beside this one in the report (e.g. the recorded kubelet-on-runtime-shim run); a missing file is left out")
	record := fs.String("record", "", "keep this run's junit file, trimmed to the selected specs (conformance.TrimJUnit), and meta.json in this directory; the report then reads them from there")
	if err := fs.Parse(args); err != nil {
		return err
	}
	page := conformance.NodePage
	if *e2eNodeTest != "" {
		if suite.E2ETest != "" || *kubelet != "" {
			return errors.New("-e2e-node-test runs instead of -e2e-test, on microlet (no -kubelet)")
		}
		suite.E2ETest = *e2eNodeTest
		page = func(int) conformance.Page { return conformance.E2ENodePage }
		// The node suite's own selection, where no flag says otherwise.
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["focus"] {
			suite.Focus = conformance.E2ENodeFocus
		}
		if !set["skip"] {
			suite.Skip = conformance.E2ENodeSkip
		}
		if !set["focus-file"] {
			suite.FocusFile = conformance.E2ENodeFocusFile
		}
		// Dry runs list specs with the node suite's flags too.
		suite.Node = &conformance.NodeE2E{Host: "https://127.0.0.1:6443", NodeName: "dry-run", DNSDomain: e2eNodeClusterDomain}
	}
	if suite.E2ETest == "" {
		return errors.New("-e2e-test is required (hack/build-e2e.sh e2e.test)")
	}
	if suite.Procs > 1 && suite.Ginkgo == "" {
		return errors.New("-procs > 1 needs -ginkgo (hack/build-e2e.sh ginkgo)")
	}
	repo, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	if suite.ResultsDir, err = filepath.Abs(*results); err != nil {
		return err
	}
	if err := os.RemoveAll(suite.ResultsDir); err != nil {
		return err
	}
	if err := os.MkdirAll(suite.ResultsDir, 0o755); err != nil {
		return err
	}
	if suite.Kubectl == "" {
		if suite.Kubectl, err = controlplane.FindKubectl(); err != nil {
			return err
		}
	}
	if suite.DryRun {
		suite.Kubeconfig = "/dev/null"
		_, err := suite.Run(ctx)
		return err
	}

	step := func(format string, a ...any) {
		fmt.Fprintf(out, "conformance: %s: %s\n", time.Since(began).Round(time.Second), fmt.Sprintf(format, a...))
	}
	microletVersion := gitDescribe(repo)
	bins := filepath.Join(suite.ResultsDir, "bin")
	step("building microlet %s into %s", microletVersion, bins)
	pkgs := append(node.Packages(), "github.com/microlet/microlet/services/runtime-shim/pause", conformance.BusyboxShPackage)
	if *kubelet != "" {
		pkgs = []string{"github.com/microlet/microlet/services/runtime-shim", "github.com/microlet/microlet/services/runtime-shim/pause", conformance.BusyboxShPackage}
	}
	if err := goBuild(ctx, repo, bins, "-X github.com/microlet/microlet/internal/version.Version="+microletVersion, pkgs...); err != nil {
		return err
	}
	if imgs.pause == "" {
		imgs.pause = filepath.Join(bins, "pause")
	}
	if imgs.busyboxSh == "" {
		imgs.busyboxSh = filepath.Join(bins, "busybox-sh")
	}
	step("importing the test images")
	src, err := imgs.prepare(ctx, out)
	if err != nil {
		return err
	}
	// Images pulled with pullPolicy Always come from a local registry that
	// runtime-shim uses as registry.k8s.io's mirror.
	mirror, err := conformance.StartMirror(ctx, src)
	if err != nil {
		return err
	}
	defer func() { _ = mirror.Close() }()
	step("registry.k8s.io mirror for %s on %s", strings.Join(conformance.MirrorImages, ", "), mirror.Host())
	shimArgs := []string{conformance.MirrorFlag(mirror)}

	step("starting etcd, kube-apiserver, kube-scheduler, kube-controller-manager")
	cpOpts := controlplane.Options{Scheduler: true, ControllerManager: true}
	if suite.Node != nil {
		// As the node suite's own API server (test/e2e_node/services):
		// it does not wait for a namespace's default ServiceAccount
		// before creating pods, so that admission must not require one.
		cpOpts.ExtraAPIServerArgs = []string{"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"}
	}
	cp, err := controlplane.Start(ctx, cpOpts)
	if err != nil {
		return err
	}
	defer func() {
		saveDir(filepath.Join(cp.Dir(), "logs"), filepath.Join(suite.ResultsDir, "controlplane-logs"))
		if err := cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "conformance: stop control plane:", err)
		}
	}()
	suite.Kubeconfig = cp.AdminKubeconfig()

	nodeKind, nodeName2 := "microlet", ""
	if *kubelet == "" {
		nodeLog, err := os.Create(filepath.Join(suite.ResultsDir, "microlet.log"))
		if err != nil {
			return err
		}
		defer func() { _ = nodeLog.Close() }()
		step("starting the microlet node (log: %s)", nodeLog.Name())
		opts := conformance.NodeOptions{Bins: bins, Name: *nodeName, Out: nodeLog,
			Args: map[string][]string{components.RuntimeShim: shimArgs}}
		if suite.Node != nil {
			opts.StaticPods, opts.ClusterDomain, opts.CgroupRoot, opts.Port = true, e2eNodeClusterDomain, "/", conformance.KubeletPort
			opts.ReadOnlyPort = conformance.KubeletReadOnlyPort
			// ContainerLogPath reads pods' logs in the kubelet's directories.
			opts.KubeletLogDirs = true
			// The device plugin specs serve their plugins in the kubelet's
			// directory, hard-coded.
			opts.Args[components.PodSyncd] = []string{"--device-plugins-dir=" + pluginapi.DevicePluginPath}
		}
		n, err := conformance.StartNode(ctx, cp, opts)
		if err != nil {
			return err
		}
		defer n.Stop()
		nodeName2 = n.Name
		if suite.Node != nil {
			suite.Node = &conformance.NodeE2E{Host: cp.Host(), BearerToken: cp.AdminToken(), NodeName: n.Name,
				DNSDomain: e2eNodeClusterDomain, RuntimeEndpoint: components.Endpoint(n.RunDir(), components.RuntimeShim)}
		}
	} else {
		nodeKind = conformance.KubeletNodeName
		k, err := startKubelet(ctx, cp, *kubelet, bins, *nodeName, suite.ResultsDir, shimArgs, step)
		if err != nil {
			return err
		}
		defer func() {
			k.Stop()
			if diff := k.RestoreReport(); diff != "" {
				fmt.Fprintf(os.Stderr, "conformance: kernel parameters not restored: %s (recorded in %s)\n", diff, filepath.Join(suite.ResultsDir, "sysctls-before"))
			} else {
				step("kernel parameters restored: %s", strings.ReplaceAll(strings.TrimSpace(k.RecordedSysctls()), "\n", ", "))
			}
		}()
		nodeName2 = k.Name
	}

	e2eLog, err := os.Create(filepath.Join(suite.ResultsDir, "e2e.log"))
	if err != nil {
		return err
	}
	defer func() { _ = e2eLog.Close() }()
	suite.Out = io.MultiWriter(out, e2eLog)
	command := strings.Join(suite.Args(), " ")
	step("node %s Ready; running %s", nodeName2, command)
	command0 := "make conformance"
	if *kubelet != "" {
		command0 += " RUNTIME_ONLY=1"
	}
	if suite.Node != nil {
		command0 += " SUITE=e2enode" + e2eNodeSelection(suite)
	}
	meta := conformance.Meta{
		Node: nodeKind, E2E: *e2eVersion, Microlet: microletVersion, Procs: suite.Procs,
		Command: command0, Kernel: commandOutput("uname", "-r"),
		Docker: "Docker " + commandOutput("docker", "version", "--format", "{{.Server.Version}}") + " (" + commandOutput("docker", "info", "--format", "{{.Driver}}") + ")",
		Cgroup: "cgroup v" + commandOutput("docker", "info", "--format", "{{.CgroupVersion}}"),
	}
	res, runErr := suite.Run(ctx)
	meta.Wall = humanMinutes(time.Since(began))
	if err := writeJSON(filepath.Join(suite.ResultsDir, "meta.json"), meta); err != nil {
		return err
	}
	if runErr != nil {
		return runErr
	}
	sel := res.Selected()
	fmt.Fprintf(out, "\nconformance: %d selected: %d passed, %d failed, %d skipped; suite %s, whole run %s\n",
		len(sel), res.Count(conformance.Passed), res.Count(conformance.Failed), res.Count(conformance.Skipped),
		res.Duration.Round(time.Second), time.Since(began).Round(time.Second))
	for _, c := range sel {
		if c.Result == conformance.Failed {
			fmt.Fprintf(out, "  FAILED %s\n", c.Name)
		}
	}
	for _, c := range res.SetupFailures() {
		fmt.Fprintf(out, "  SETUP FAILED %s: %s\n", c.Name, c.Message)
	}
	fmt.Fprintf(out, "conformance: results in %s (%s, e2e.log, node logs, controlplane-logs/)\n", suite.ResultsDir, conformance.JUnitFile)
	junit := filepath.Join(suite.ResultsDir, conformance.JUnitFile)
	if *record != "" {
		if err := recordRun(suite.ResultsDir, *record); err != nil {
			return err
		}
		junit = filepath.Join(*record, conformance.JUnitFile)
		fmt.Fprintf(out, "conformance: run recorded in %s\n", *record)
	}
	if *reportPath != "" {
		cols := []string{nodeKind + "=" + junit}
		if *otherColumns != "" {
			_, other, ok := strings.Cut(*otherColumns, "=")
			if !ok {
				other = *otherColumns
			}
			if _, err := os.Stat(other); err == nil {
				cols = append(cols, *otherColumns)
			} else {
				fmt.Fprintf(out, "conformance: no %s for the report's other column\n", other)
			}
		}
		if nodeKind != "microlet" {
			// microlet's column comes first.
			for i, j := 0, len(cols)-1; i < j; i, j = i+1, j-1 {
				cols[i], cols[j] = cols[j], cols[i]
			}
		}
		fulls := recordedFullColumns()
		if suite.Node != nil {
			fulls = nil
		}
		if err := writeReport(*reportPath, *reasonsPath, page(len(cols)), cols, fulls); err != nil {
			return err
		}
		fmt.Fprintf(out, "conformance: report written to %s\n", *reportPath)
	}
	if res.Count(conformance.Failed) > 0 || len(res.SetupFailures()) > 0 {
		return errFailed
	}
	return nil
}

// recordRun keeps a run's trimmed junit file and meta.json in dir.
func recordRun(results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := conformance.TrimJUnit(filepath.Join(results, conformance.JUnitFile), filepath.Join(dir, conformance.JUnitFile)); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(results, "meta.json"))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "meta.json"), b, 0o644)
}

// startKubelet starts the upstream kubelet on runtime-shim as the
// cluster's node, its and the shim's logs in results, and records the
// kernel parameters it will change in results/sysctls-before.
func startKubelet(ctx context.Context, cp *controlplane.ControlPlane, kubelet, bins, name, results string, shimArgs []string, step func(string, ...any)) (*conformance.KubeletNode, error) {
	kubeletLog, err := os.Create(filepath.Join(results, "kubelet.log"))
	if err != nil {
		return nil, err
	}
	shimLog, err := os.Create(filepath.Join(results, "runtime-shim.log"))
	if err != nil {
		return nil, err
	}
	step("starting runtime-shim and the upstream kubelet %s (logs: %s, %s)", commandOutput(kubelet, "--version"), kubeletLog.Name(), shimLog.Name())
	k, err := conformance.StartKubelet(ctx, cp, conformance.KubeletOptions{
		Kubelet: kubelet, Bins: bins, Name: name, KubeletOut: kubeletLog, ShimOut: shimLog, ShimArgs: shimArgs,
	})
	if err != nil {
		return nil, fmt.Errorf("%w (logs: %s, %s)", err, kubeletLog.Name(), shimLog.Name())
	}
	if err := os.WriteFile(filepath.Join(results, "sysctls-before"), []byte(k.RecordedSysctls()), 0o644); err != nil {
		k.Stop()
		return nil, err
	}
	step("kernel parameters before the kubelet (restored at the end): %s", strings.ReplaceAll(strings.TrimSpace(k.RecordedSysctls()), "\n", ", "))
	return k, nil
}

// junitFlags collects repeated -junit [NAME=]FILE.
type junitFlags []string

func (j *junitFlags) String() string     { return strings.Join(*j, ",") }
func (j *junitFlags) Set(v string) error { *j = append(*j, v); return nil }

func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	var junits junitFlags
	fs.Var(&junits, "junit", "[NAME=]FILE: a run's junit file (meta.json beside it is read too); repeat for more columns, microlet's first")
	var fulls junitFlags
	fs.Var(&fulls, "full", "NAME=DIR: a recorded full-suite run (DIR/<phase>/junit_01.xml, DIR/meta.json); repeat for more columns, microlet's first")
	reasons := fs.String("reasons", "test/conformance/reasons.yaml", "failure reasons (test name regexp → reason, owner)")
	e2eNode := fs.Bool("e2e-node", false, "the runs are of e2e_node.test (make conformance SUITE=e2enode): that suite's page")
	outPath := fs.String("o", "docs/conformance.md", "the Markdown report to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(junits) == 0 {
		return errors.New("at least one -junit is required")
	}
	p := conformance.NodePage(len(junits))
	if *e2eNode {
		p = conformance.E2ENodePage
	}
	return writeReport(*outPath, *reasons, p, junits, fulls)
}

// generator names the command that makes the report, inside it.
const generator = "`hack/conformance-report.sh` (`go run ./test/conformance/cmd/conformance report`)"

func writeReport(outPath, reasonsPath string, page conformance.Page, junits, fulls []string) error {
	reasons, err := conformance.LoadReasons(reasonsPath)
	if err != nil {
		return err
	}
	var cols []conformance.Column
	for _, j := range junits {
		name, path, ok := strings.Cut(j, "=")
		if !ok {
			name, path = "microlet", j
		}
		run, err := conformance.ParseJUnit(path)
		if err != nil {
			return err
		}
		meta, err := conformance.LoadMeta(filepath.Join(filepath.Dir(path), "meta.json"))
		if err != nil {
			return err
		}
		cols = append(cols, conformance.Column{Name: name, Run: run, Meta: meta, JUnit: path})
	}
	f, err := os.Create(outPath)
	if err != nil {
		return err
	}
	if err := conformance.WritePage(f, page, cols, reasons, generator); err != nil {
		_ = f.Close()
		return err
	}
	var fullCols []conformance.FullColumn
	for _, spec := range fulls {
		name, dir, ok := strings.Cut(spec, "=")
		if !ok {
			name, dir = "microlet", spec
		}
		col, err := conformance.LoadFullColumn(name, dir)
		if err != nil {
			_ = f.Close()
			return err
		}
		fullCols = append(fullCols, col)
	}
	if len(fullCols) > 0 {
		if _, err := io.WriteString(f, "\n"); err != nil {
			_ = f.Close()
			return err
		}
		if err := conformance.WriteFullReport(f, fullCols, reasons); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

// e2eNodeSelection is how a node suite run's selection differs from
// SUITE=e2enode's default, as make conformance variables.
func e2eNodeSelection(s conformance.Suite) string {
	var b strings.Builder
	for _, v := range [][3]string{
		{"FOCUS", s.Focus, conformance.E2ENodeFocus}, {"SKIP", s.Skip, conformance.E2ENodeSkip},
		{"FOCUS_FILE", s.FocusFile, conformance.E2ENodeFocusFile}, {"SKIP_FILE", s.SkipFile, ""},
	} {
		if v[1] != v[2] {
			fmt.Fprintf(&b, " %s='%s'", v[0], v[1])
		}
	}
	return b.String()
}

// e2eNodeClusterDomain is the node's clusterDomain in an e2e_node.test run
// (the suite's --dns-domain): the kubelet's usual one.
const e2eNodeClusterDomain = "cluster.local"

// The recorded runs docs/conformance.md is made from
// (hack/conformance-report.sh lists the same).
const (
	microletRecord     = "test/conformance/runs/microlet"
	kubeletRecord      = "test/conformance/runs/kubelet-on-runtime-shim"
	fullMicroletRecord = "test/conformance/runs/full/microlet"
	fullKubeletRecord  = "test/conformance/runs/full/kubelet"
)

// recordedNodeColumns are the recorded single-node runs that exist, as
// report's -junit values.
func recordedNodeColumns() []string {
	var cols []string
	for _, c := range [][2]string{{"microlet", microletRecord}, {"kubelet on runtime-shim", kubeletRecord}} {
		if _, err := os.Stat(filepath.Join(c[1], conformance.JUnitFile)); err == nil {
			cols = append(cols, c[0]+"="+filepath.Join(c[1], conformance.JUnitFile))
		}
	}
	return cols
}

// recordedFullColumns are the recorded full-suite runs that exist, as
// report's -full values.
func recordedFullColumns() []string {
	var cols []string
	for _, c := range [][2]string{{"microlet", fullMicroletRecord}, {"kubelet", fullKubeletRecord}} {
		if _, err := os.Stat(c[1]); err == nil {
			cols = append(cols, c[0]+"="+c[1])
		}
	}
	return cols
}

// goBuild builds static binaries of pkgs into dir.
func goBuild(ctx context.Context, repo, dir, ldflags string, pkgs ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"build", "-trimpath", "-ldflags", strings.TrimSpace("-s -w " + ldflags), "-o", dir + "/"}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

func gitDescribe(repo string) string {
	out, err := exec.Command("git", "-C", repo, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

func commandOutput(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// saveDir copies the regular files of src into dst (the control plane's
// logs, before Stop removes its directory).
func saveDir(src, dst string) {
	entries, err := os.ReadDir(src)
	if err != nil {
		return
	}
	_ = os.MkdirAll(dst, 0o755)
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(src, e.Name())); err == nil {
			_ = os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
		}
	}
}

func humanMinutes(d time.Duration) string {
	return fmt.Sprintf("%d min %02d s", int(d.Minutes()), int(d.Seconds())%60)
}
