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

// JUnitFile is the name e2e.test gives its junit report in --report-dir.
const JUnitFile = "junit_01.xml"

// Suite is one run of e2e.test.
type Suite struct {
	// E2ETest is the suite binary (hack/build-e2e.sh e2e.test).
	E2ETest string
	// Ginkgo is the ginkgo CLI (hack/build-e2e.sh ginkgo); with Procs > 1
	// it runs the suite in that many parallel processes. e2e.test alone
	// runs serially.
	Ginkgo string
	Procs  int
	// Kubeconfig is an admin kubeconfig of the cluster; Kubectl the kubectl
	// the suite shells out to.
	Kubeconfig, Kubectl string
	// Focus and Skip select specs (Ginkgo regular expressions).
	Focus, Skip string
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
