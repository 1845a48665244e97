package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remotecommandserver "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/utils/exec"
)

// maxExecOutput bounds what ExecSync keeps of each stream, like the kubelet's 16 MiB.
const maxExecOutput = 16 << 20

type limitedBuffer struct {
	bytes.Buffer
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxExecOutput - l.Len(); room < len(p) {
		if room > 0 {
			l.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return l.Buffer.Write(p)
}

// ExecSync runs a command in the container and returns its output and exit
// code. When the timeout passes, the process is killed (Docker has no call
// for that; the shim shares the host PID namespace with dockerd) and the call
// fails with DeadlineExceeded.
func (b *Backend) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	if len(req.Cmd) == 0 {
		return nil, invalid("cmd", "is required")
	}
	ct, err := b.inspectContainer(ctx, req.ContainerId)
	if err != nil {
		return nil, err
	}
	if ct.State == nil || !ct.State.Running {
		return nil, status.Errorf(codes.FailedPrecondition, "container %s is not running", ct.ID)
	}
	ec, err := b.cli.ExecCreate(ctx, ct.ID, client.ExecCreateOptions{Cmd: req.Cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return nil, toStatus(err, "exec in %s", ct.ID)
	}
	att, err := b.cli.ExecAttach(ctx, ec.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, toStatus(err, "exec attach in %s", ct.ID)
	}
	defer att.Close()
	var stdout, stderr limitedBuffer
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader)
		done <- err
	}()
	var timeout <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(time.Duration(req.Timeout) * time.Second)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case err := <-done:
		if err != nil {
			return nil, status.Errorf(codes.Unknown, "exec output of %s: %v", ct.ID, err)
		}
	case <-timeout:
		b.killExec(context.WithoutCancel(ctx), ec.ID)
		return nil, status.Errorf(codes.DeadlineExceeded, "command %q timed out after %ds", req.Cmd, req.Timeout)
	case <-ctx.Done():
		b.killExec(context.WithoutCancel(ctx), ec.ID)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	ins, err := b.waitExec(ctx, ec.ID)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), ExitCode: int32(ins.ExitCode)}, nil
}

// waitExec polls until Docker marks the exec finished; its output can end a
// moment before its exit code is recorded.
func (b *Backend) waitExec(ctx context.Context, id string) (client.ExecInspectResult, error) {
	for i := 0; ; i++ {
		ins, err := b.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		if err != nil {
			return ins, toStatus(err, "exec inspect")
		}
		if !ins.Running {
			return ins, nil
		}
		select {
		case <-ctx.Done():
			return ins, status.FromContextError(ctx.Err()).Err()
		case <-time.After(time.Duration(min(i+1, 20)) * 5 * time.Millisecond):
		}
	}
}

func (b *Backend) killExec(ctx context.Context, id string) {
	ins, err := b.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
	if err != nil || !ins.Running || ins.PID <= 0 {
		return
	}
	if err := syscall.Kill(ins.PID, syscall.SIGKILL); err != nil {
		b.log.Warn("kill timed-out exec", "exec", id, "pid", ins.PID, "err", err)
	}
}

// Exec returns the streaming server's URL for an interactive exec.
func (b *Backend) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	if b.opts.Streamer == nil {
		return nil, status.Error(codes.Unimplemented, "streaming server not configured")
	}
	if len(req.Cmd) == 0 {
		return nil, invalid("cmd", "is required")
	}
	if !req.Stdout && !req.Stderr && !req.Stdin {
		return nil, invalid("stdin/stdout/stderr", "one of them must be set")
	}
	if _, err := b.inspectContainer(ctx, req.ContainerId); err != nil {
		return nil, err
	}
	return b.opts.Streamer.GetExec(req)
}

// Attach returns the streaming server's URL to attach to the container.
func (b *Backend) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	if b.opts.Streamer == nil {
		return nil, status.Error(codes.Unimplemented, "streaming server not configured")
	}
	if !req.Stdout && !req.Stderr && !req.Stdin {
		return nil, invalid("stdin/stdout/stderr", "one of them must be set")
	}
	if _, err := b.inspectContainer(ctx, req.ContainerId); err != nil {
		return nil, err
	}
	return b.opts.Streamer.GetAttach(req)
}

// PortForward returns the streaming server's URL to forward ports of the sandbox.
func (b *Backend) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	if b.opts.Streamer == nil {
		return nil, status.Error(codes.Unimplemented, "streaming server not configured")
	}
	if _, err := b.inspectSandbox(ctx, req.PodSandboxId); err != nil {
		return nil, err
	}
	return b.opts.Streamer.GetPortForward(req)
}

// StreamRuntime adapts the backend to the streaming server's Runtime.
type StreamRuntime struct{ B *Backend }

func resizeLoop(ctx context.Context, resize <-chan remotecommandserver.TerminalSize, do func(h, w uint)) {
	if resize == nil {
		return
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case s, ok := <-resize:
				if !ok {
					return
				}
				if s.Height > 0 && s.Width > 0 {
					do(uint(s.Height), uint(s.Width))
				}
			}
		}
	}()
}

// pump copies the hijacked stream's output to out/errOut (raw for a TTY,
// demultiplexed otherwise) and in to it, until the output ends.
func pump(hj client.HijackedResponse, in io.Reader, out, errOut io.Writer, tty bool) error {
	if in != nil {
		go func() {
			_, _ = io.Copy(hj.Conn, in)
			if cw, ok := hj.Conn.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
		}()
	}
	if out == nil {
		out = io.Discard
	}
	if errOut == nil {
		errOut = io.Discard
	}
	var err error
	if tty {
		_, err = io.Copy(out, hj.Reader)
	} else {
		_, err = stdcopy.StdCopy(out, errOut, hj.Reader)
	}
	return err
}

func nonNilWriter(w io.WriteCloser) io.Writer {
	if w == nil {
		return nil
	}
	return w
}

// Exec implements the streaming Runtime: an interactive exec.
func (r StreamRuntime) Exec(ctx context.Context, containerID string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	b := r.B
	ec, err := b.cli.ExecCreate(ctx, containerID, client.ExecCreateOptions{
		Cmd: cmd, TTY: tty, AttachStdin: in != nil, AttachStdout: out != nil, AttachStderr: errOut != nil && !tty,
	})
	if err != nil {
		return fmt.Errorf("exec create: %w", err)
	}
	hj, err := b.cli.ExecAttach(ctx, ec.ID, client.ExecAttachOptions{TTY: tty})
	if err != nil {
		return fmt.Errorf("exec attach: %w", err)
	}
	defer hj.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resizeLoop(rctx, resize, func(h, w uint) {
		_, _ = b.cli.ExecResize(rctx, ec.ID, client.ExecResizeOptions{Height: h, Width: w})
	})
	if err := pump(hj.HijackedResponse, in, nonNilWriter(out), nonNilWriter(errOut), tty); err != nil {
		return err
	}
	ins, err := b.waitExec(ctx, ec.ID)
	if err != nil {
		return err
	}
	if ins.ExitCode != 0 {
		return exec.CodeExitError{Err: fmt.Errorf("command %q exited with %d", cmd, ins.ExitCode), Code: ins.ExitCode}
	}
	return nil
}

// Attach implements the streaming Runtime: attach to the container's main process.
func (r StreamRuntime) Attach(ctx context.Context, containerID string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommandserver.TerminalSize) error {
	b := r.B
	hj, err := b.cli.ContainerAttach(ctx, containerID, client.ContainerAttachOptions{
		Stream: true, Stdin: in != nil, Stdout: out != nil, Stderr: errOut != nil,
	})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer hj.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resizeLoop(rctx, resize, func(h, w uint) {
		_, _ = b.cli.ContainerResize(rctx, containerID, client.ContainerResizeOptions{Height: h, Width: w})
	})
	return pump(hj.HijackedResponse, in, nonNilWriter(out), nonNilWriter(errOut), tty)
}

// PortForward implements the streaming Runtime: it dials the port inside the
// sandbox's network namespace (entered on a locked OS thread) and copies both ways.
func (r StreamRuntime) PortForward(ctx context.Context, podSandboxID string, port int32, stream io.ReadWriteCloser) error {
	b := r.B
	sb, err := b.inspectSandbox(ctx, podSandboxID)
	if err != nil {
		return err
	}
	if !sb.Ready || sb.Pid <= 0 {
		return fmt.Errorf("pod sandbox %s is not running", podSandboxID)
	}
	var conn net.Conn
	if sb.HostNetwork {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	} else {
		conn, err = dialInNetns(ctx, fmt.Sprintf("/proc/%d/ns/net", sb.Pid), fmt.Sprintf("127.0.0.1:%d", port))
	}
	if err != nil {
		return fmt.Errorf("port forward to %d in %s: %w", port, podSandboxID, err)
	}
	defer conn.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	_ = stream.Close()
	wg.Wait()
	return err
}

// dialInNetns connects from inside another network namespace. The socket
// keeps the namespace it was created in, so only the dial needs the thread
// switched; the thread is switched back (or, if that fails, left locked so Go
// retires it rather than reuse a thread in the wrong namespace).
func dialInNetns(ctx context.Context, nsPath, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		c, derr := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, "tcp4", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, derr}
	}()
	r := <-ch
	return r.c, r.err
}
