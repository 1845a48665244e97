package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a process gets after SIGTERM before SIGKILL. The
// apiserver drains for a few seconds by default; etcd stops at once.
const stopGrace = 15 * time.Second

// process is one child (etcd or kube-apiserver) with its log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once Wait returned
	err     error         // Wait's result, valid after done
}

// startProcess runs bin in its own process group, so a terminal's Ctrl-C
// reaches only the harness, which then stops children in order; Pdeathsig
// kills the child if the harness dies without stopping it (panic, SIGKILL,
// test timeout), which is what keeps crashed test binaries from leaking.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the child's process ID (also its process group ID).
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the child is gone.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the child's process group, waits up to grace, then
// SIGKILLs it; it fails only if the process survives that. The group is addressed by the PID we started, never by name,
// so nothing else on the machine is touched.
func (p *process) stop(grace time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	// Not an error: an apiserver draining long watches on a loaded
	// machine can outlast the grace period, and callers only need it gone.
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survives SIGKILL", p.name, p.pid())
	}
}

// failure describes an early exit with the end of the child's log, which is
// where etcd and the apiserver say why they gave up.
func (p *process) failure() error {
	return fmt.Errorf("%s exited (%v); last log lines from %s:\n%s", p.name, p.err, p.logPath, tail(p.logPath, 15))
}

// addrInUse tells a lost free-port race apart from a real failure.
func (p *process) addrInUse() bool {
	b, _ := os.ReadFile(p.logPath)
	return bytes.Contains(b, []byte("address already in use"))
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Pdeathsig fires when the *thread* that forked the child exits, not the
// process. Go ends a thread when a goroutine locked to it returns, so a
// caller on such a goroutine would see its control plane SIGKILLed for no
// reason. Every child is therefore forked from one goroutine that locks its
// thread and never returns.
var spawnReq = make(chan spawnCall)

type spawnCall struct {
	cmd *exec.Cmd
	err chan error
}

func init() {
	go func() {
		runtime.LockOSThread()
		for c := range spawnReq {
			c.err <- c.cmd.Start()
		}
	}()
}

func spawn(cmd *exec.Cmd) error {
	c := spawnCall{cmd: cmd, err: make(chan error, 1)}
	spawnReq <- c
	return <-c.err
}

// errExited stops a readiness wait as soon as the child is gone.
var errExited = errors.New("process exited")
