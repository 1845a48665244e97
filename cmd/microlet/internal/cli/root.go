package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/version"
)

// exitError carries the exit status an error should end the process with.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// failure is a run-time failure: exit status 1.
func failure(format string, args ...any) error {
	return &exitError{code: 1, err: fmt.Errorf(format, args...)}
}

// badUsage is a usage or configuration problem: exit status 2.
func badUsage(err error) error { return &exitError{code: 2, err: err} }

// exitCode maps an error to the process status. Our commands mark their
// errors with exitError; anything else comes from cobra itself (unknown
// command or flag, wrong argument count) and is a usage error.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}

// Execute runs the microlet command line with args (without the program
// name) and returns the exit status.
func Execute(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	// One line, so scripts and healthchecks can show it as is.
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	fmt.Fprintf(stderr, "microlet: %s\n", msg)
	return exitCode(err)
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "microlet",
		Short:         "microlet runs and inspects a Kubernetes node agent made of small gRPC services",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version.Version,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return badUsage(err) })
	root.AddCommand(newRunCmd(stdout, stderr), newCredentialsCmd(stdout, stderr), newStatusCmd(stdout, stderr), newHealthCmd(stdout), newGetCmd(stdout, stderr))
	return root
}

// RunDirEnv names the environment variable that sets the inspecting
// subcommands' default --run-dir, so `microlet status` and `microlet get`
// find a `microlet run --run-dir` elsewhere (`make run` uses /tmp/microlet-run).
const RunDirEnv = "MICROLET_RUN_DIR"

// addRunDir adds the --run-dir flag every inspecting subcommand shares to fs.
func addRunDir(fs *pflag.FlagSet, runDir *string) {
	def := service.DefaultRunDir
	if d := os.Getenv(RunDirEnv); d != "" {
		def = d
	}
	fs.StringVar(runDir, "run-dir", def, "directory of the services' sockets, as given to microlet run (default $"+RunDirEnv+", else "+service.DefaultRunDir+")")
}

// argsExactly is cobra.ExactArgs with the usage exit code.
func argsExactly(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return badUsage(err)
		}
		return nil
	}
}
