package criexec

import (
	"context"
	"errors"
	"time"

	utilexec "k8s.io/utils/exec"
)

// Execer is the ExecSync of cri-client's runtime service
// (k8s.io/cri-api/pkg/apis.ContainerManager).
type Execer interface {
	ExecSync(ctx context.Context, containerID string, cmd []string, timeout time.Duration) (stdout, stderr []byte, err error)
}

// Result is what a command that ran left behind.
type Result struct {
	ExitCode int
	Stdout   []byte
	Stderr   []byte
}

// Output is the command's stdout followed by its stderr.
func (r Result) Output() string { return string(r.Stdout) + string(r.Stderr) }

// ExecSync runs cmd in the container with timeout (whole seconds, as the CRI
// carries it; 0 is none). A command that ran and exited non-zero is a Result
// with its exit code, not an error; the error is the runtime's (a command
// that timed out: errors.Is(err, remote.ErrCommandTimedOut) of
// k8s.io/cri-client/pkg).
func ExecSync(ctx context.Context, rt Execer, containerID string, cmd []string, timeout time.Duration) (Result, error) {
	stdout, stderr, err := rt.ExecSync(ctx, containerID, cmd, timeout)
	res := Result{Stdout: stdout, Stderr: stderr}
	var exit utilexec.CodeExitError
	if errors.As(err, &exit) {
		res.ExitCode = exit.ExitStatus()
		return res, nil
	}
	return res, err
}
