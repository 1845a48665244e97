package conformance

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// The default selection: the sig-node [Conformance] specs a single node can
// run alongside others (upstream's node-conformance jobs skip the same tags).
const (
	DefaultFocus = `\[sig-node\].*\[Conformance\]`
	DefaultSkip  = `\[Serial\]|\[Disruptive\]|\[Flaky\]`
)

// The SUITE=e2enode selection: the [NodeConformance] specs of
// e2e_node.test's own files (test/e2e_node/; the test/e2e/common specs it
// links too are SUITE=nodeconformance's, through e2e.test), without the tags
// a node shared with other specs cannot run or that are not on by default.
const (
	E2ENodeFocus     = `\[NodeConformance\]`
	E2ENodeSkip      = `\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:`
	E2ENodeFocusFile = `test/e2e_node/`
)

// JUnitFile is the name e2e.test gives its junit report in --report-dir.
const JUnitFile = "junit_01.xml"

// NodeE2E makes a Suite run e2e_node.test, the kubelet's own node suite
// (k8s.io/kubernetes/test/e2e_node), against a node that is already
// running: it starts no services of its own and talks to the API server
// with a bearer token (it has no --kubeconfig).
type NodeE2E struct {
	// Host is the API server's URL; BearerToken a token of a member of
	// system:masters (the control plane's admin token).
	Host, BearerToken string
	// NodeName is the node under test, the cluster's only Node (the
	// suite's setup fails when there are more).
	NodeName string
	// DNSDomain is the node's clusterDomain (the FQDN specs compare with it).
	DNSDomain string
	// RuntimeEndpoint is the node's CRI endpoint (a unix:// URL), which
	// some specs ask directly.
	RuntimeEndpoint string
}

// KubeletPort is the kubelet API's port where e2e_node.test looks for it
// on 127.0.0.1 (its /configz in standalone mode, the TLS specs).
const KubeletPort = 10250

// KubeletReadOnlyPort is the kubelet's read-only port in e2e_node.test's
// own node configuration (test/e2e_node/services), where its specs read
// /stats/summary and /metrics/cadvisor over plain HTTP.
const KubeletReadOnlyPort = 10255

// flags are e2e_node.test's flags for the node: no services started, no
// image pre-pull (nothing can be pulled here; the harness imports them).
// --standalone-mode only changes where the suite reads the node's
// configuration: /configz at 127.0.0.1:KubeletPort instead of through the
// API server's node proxy, which refuses a node whose address is not
// global unicast ("address not allowed"), as the loopback node IP here is;
// the node still registers, and pods still go through the API server.
func (n *NodeE2E) flags() []string {
	return []string{
		"--standalone-mode",
		"--host=" + n.Host,
		"--bearer-token=" + n.BearerToken,
		"--node-name=" + n.NodeName,
		"--dns-domain=" + n.DNSDomain,
		"--container-runtime-endpoint=" + n.RuntimeEndpoint,
		"--image-service-endpoint=" + n.RuntimeEndpoint,
		"--start-services=false",
		"--stop-services=false",
		"--prepull-images=false",
	}
}

// Suite is one run of e2e.test.
type Suite struct {
	// E2ETest is the suite binary (hack/build-e2e.sh e2e.test, or
	// e2e_node.test with Node set).
	E2ETest string
	// Node, when set, says E2ETest is e2e_node.test and how it reaches the node.
	Node *NodeE2E
	// Ginkgo is the ginkgo CLI (hack/build-e2e.sh ginkgo); with Procs > 1
	// it runs the suite in that many parallel processes. e2e.test alone
	// runs serially.
	Ginkgo string
	Procs  int
	// Kubeconfig is an admin kubeconfig of the cluster; Kubectl the kubectl
	// the suite shells out to.
	Kubeconfig, Kubectl string
	// Focus and Skip select specs (Ginkgo regular expressions); FocusFile
	// and SkipFile, when set, keep only the specs defined in files FocusFile
	// matches and not SkipFile.
	Focus, Skip, FocusFile, SkipFile string
	// ResultsDir receives JUnitFile and the suite's output files.
	ResultsDir string
	// Timeout bounds the whole suite (Ginkgo's default of 1 h is too short
	// for a serial run here).
	Timeout time.Duration
	// DryRun lists the selected specs without running them.
	DryRun bool
	// Extra are more e2e.test flags.
	Extra []string
	// Out receives the suite's output.
	Out io.Writer
}

// Args returns the command line: the ginkgo CLI with its own flags before
// e2e.test and the suite's after "--" when running in parallel, else
// e2e.test with Ginkgo's flags prefixed "ginkgo.".
func (s Suite) Args() []string {
	ginkgoFlags := []string{
		"focus=" + s.Focus,
		"timeout=" + s.Timeout.String(),
		"no-color",
		// Not a letter per unselected spec: the suite has ~7,500.
		"silence-skips",
		// Say which spec is slow while it runs, not only at the end.
		"poll-progress-after=5m",
		"poll-progress-interval=5m",
	}
	if s.Skip != "" {
		ginkgoFlags = append(ginkgoFlags, "skip="+s.Skip)
	}
	if s.FocusFile != "" {
		ginkgoFlags = append(ginkgoFlags, "focus-file="+s.FocusFile)
	}
	if s.SkipFile != "" {
		ginkgoFlags = append(ginkgoFlags, "skip-file="+s.SkipFile)
	}
	if s.DryRun {
		ginkgoFlags = append(ginkgoFlags, "dry-run", "v")
	}
	e2eFlags := []string{
		"--provider=skeleton",
		"--kubeconfig=" + s.Kubeconfig,
		"--kubectl-path=" + s.Kubectl,
		"--report-dir=" + s.ResultsDir,
		"--e2e-output-dir=" + s.ResultsDir,
		// The nodes' logs cannot be fetched over SSH from here.
		"--disable-log-dump",
		// No kube-system pods run in this cluster.
		"--minStartupPods=0",
	}
	if s.Node != nil {
		// e2e_node.test has neither --provider, --kubeconfig, the output
		// directory nor the startup-pods check.
		e2eFlags = append([]string{"--kubectl-path=" + s.Kubectl, "--report-dir=" + s.ResultsDir}, s.Node.flags()...)
	}
	e2eFlags = append(e2eFlags, s.Extra...)
	if s.Ginkgo != "" && s.Procs > 1 {
		args := []string{s.Ginkgo, "--procs=" + strconv.Itoa(s.Procs)}
		for _, f := range ginkgoFlags {
			args = append(args, "--"+f)
		}
		args = append(args, s.E2ETest, "--")
		return append(args, e2eFlags...)
	}
	args := []string{s.E2ETest}
	for _, f := range ginkgoFlags {
		args = append(args, "--ginkgo."+f)
	}
	return append(args, e2eFlags...)
}

// Run runs the suite and returns once it has exited. A failing spec is not
// an error here (the junit file says which); an error means the suite
// could not run or wrote no report. Cancelling ctx interrupts the suite
// (SIGINT: Ginkgo still writes its report) and kills it 2 minutes later.
func (s Suite) Run(ctx context.Context) (*Run, error) {
	args := s.Args()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = s.ResultsDir
	cmd.Stdout, cmd.Stderr = s.Out, s.Out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }
	cmd.WaitDelay = 2 * time.Minute
	runErr := cmd.Run()
	if s.DryRun {
		return nil, runErr
	}
	run, err := ParseJUnit(filepath.Join(s.ResultsDir, JUnitFile))
	if err != nil {
		return nil, fmt.Errorf("the suite wrote no usable report (exit: %v): %w", runErr, err)
	}
	return run, nil
}
