package testenv

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Process is a child process a test started: its output is kept, and it is
// stopped when the test ends, its output logged if the test failed.
type Process struct {
	// Name says which process this is in log lines.
	Name string
	// Cmd is the running command.
	Cmd *exec.Cmd
	// Out collects stdout and stderr.
	Out *LockedBuffer
	// Exited is closed once the process has exited.
	Exited chan struct{}
}

// DefaultStopGrace is how long the cleanup's Stop waits after SIGTERM.
const DefaultStopGrace = 30 * time.Second

// StartProcess runs path with args. When the test ends the process gets
// SIGTERM and, after DefaultStopGrace, SIGKILL; if the test failed its
// output is logged.
func StartProcess(t testing.TB, name, path string, args ...string) *Process {
	t.Helper()
	p := &Process{Name: name, Cmd: exec.Command(path, args...), Out: &LockedBuffer{}, Exited: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Cmd.Wait(); close(p.Exited) }()
	t.Cleanup(func() {
		p.Stop(DefaultStopGrace)
		if t.Failed() {
			t.Logf("--- %s output:\n%s", name, p.Out.String())
		}
	})
	return p
}

// Stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It returns at once when the process has already exited.
func (p *Process) Stop(grace time.Duration) {
	select {
	case <-p.Exited:
		return
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Exited:
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.Exited
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.Exited
}
