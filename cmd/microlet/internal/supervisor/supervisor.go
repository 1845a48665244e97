package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/cmd/microlet/internal/probe"
	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/grpcserver"
	"github.com/microlet/microlet/internal/memtrim"
	"github.com/microlet/microlet/internal/nodecreds"
	"github.com/microlet/microlet/internal/socket"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// UsageError is a problem the user has to fix before running again (a bad
// value, a missing binary, a socket another process serves); the CLI exits
// with status 2 for it.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usage(format string, args ...any) error { return &UsageError{Err: fmt.Errorf(format, args...)} }

// EventType says what happened to a component.
type EventType string

// The events a supervisor reports, in the order they happen to one process.
const (
	EventStarted    EventType = "started"
	EventServing    EventType = "serving"
	EventExited     EventType = "exited"
	EventRestarting EventType = "restarting"
	EventStopped    EventType = "stopped"
)

// Event is one step in a component's life.
type Event struct {
	Type      EventType
	Component string
	// PID of the process concerned (0 for an external component).
	PID  int
	Time time.Time
	// Delay before the restart (EventRestarting only).
	Delay time.Duration
	// Exit describes how the process ended (EventExited, EventStopped).
	Exit string
}

// Option configures New.
type Option func(*Supervisor)

// WithLogger sets the supervisor's own logger.
func WithLogger(l *slog.Logger) Option { return func(s *Supervisor) { s.log = l } }

// WithOutput sets where the children's prefixed stdout and stderr lines go
// (default: the supervisor's own stdout and stderr).
func WithOutput(stdout, stderr io.Writer) Option {
	return func(s *Supervisor) { s.stdout, s.stderr = stdout, stderr }
}

// WithEvents calls f for every event, synchronously; f must be quick.
func WithEvents(f func(Event)) Option { return func(s *Supervisor) { s.onEvent = f } }

// WithClock replaces the clock that times restarts.
func WithClock(c clock.Clock) Option { return func(s *Supervisor) { s.clock = c } }

// Supervisor runs microlet's services as child processes.
type Supervisor struct {
	cfg            *Config
	log            *slog.Logger
	clock          clock.Clock
	stdout, stderr io.Writer
	onEvent        func(Event)
	children       []*child
	byName         map[string]*child
	outMu          sync.Mutex // keeps children's lines whole
	fatal          chan error
	metrics        *metrics
	spawns         chan spawnRequest

	mu       sync.Mutex // guards stopping and every child's mutable fields
	stopping bool
}

type child struct {
	name     string
	needs    []string
	external bool
	endpoint string
	binary   string
	argv0    string // the service's name when binary is MultiCallBinary
	args     []string
	env      []string
	ready    chan struct{}
	readyMu  sync.Once

	// guarded by Supervisor.mu
	proc     *process
	restarts int
	lastExit string
}

type process struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
	done    chan struct{} // closed once reaped
	outDone chan struct{} // closed once the output copiers hit EOF
	state   *os.ProcessState
	last    *lastLine
}

// New checks cfg and finds every binary. Its errors are UsageErrors.
func New(cfg *Config, opts ...Option) (*Supervisor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, &UsageError{Err: err}
	}
	s := &Supervisor{
		cfg:     cfg,
		log:     slog.Default(),
		clock:   clock.RealClock{},
		stdout:  os.Stdout,
		stderr:  os.Stderr,
		byName:  map[string]*child{},
		fatal:   make(chan error, len(components.All)),
		metrics: newMetrics(),
		spawns:  make(chan spawnRequest),
	}
	for _, o := range opts {
		o(s)
	}
	multi := ""
	if !cfg.SeparateBinaries {
		multi = FindMultiCall(cfg.BinDir)
	}
	for _, comp := range components.All {
		c := &child{
			name:     comp.Name,
			needs:    comp.Needs,
			external: cfg.External(comp.Name),
			endpoint: cfg.Endpoint(comp.Name),
			ready:    make(chan struct{}),
		}
		if !c.external {
			if p := cfg.Binaries[comp.Name]; p != "" {
				abs, err := filepath.Abs(p)
				if err != nil {
					return nil, &UsageError{Err: fmt.Errorf("binaries: %s: %w", comp.Name, err)}
				}
				c.binary = abs
			} else if multi != "" {
				c.binary, c.argv0 = multi, comp.Name
			} else {
				bin, err := FindBinary(comp.Name, cfg.BinDir)
				if err != nil {
					return nil, &UsageError{Err: err}
				}
				c.binary = bin
			}
			c.args = cfg.ChildArgs(comp.Name)
			c.env = cfg.ServiceEnv(comp.Name, os.Environ())
			// Every series exists from the start, so a rate() sees the first restart.
			s.metrics.restarts.WithLabelValues(c.name).Add(0)
			s.metrics.up.WithLabelValues(c.name).Set(0)
		}
		s.children = append(s.children, c)
		s.byName[c.name] = c
	}
	return s, nil
}

// Run starts the services, serves SupervisorService and keeps the services
// running until ctx ends; then it stops them in reverse start order. It
// returns a UsageError when something the user must fix stops it. Run is
// called once per Supervisor.
func (s *Supervisor) Run(ctx context.Context) error {
	peers, err := socket.ParsePeers(s.cfg.SocketAllowedUsers, s.cfg.SocketAllowedGroups)
	if err != nil {
		return usage("supervisor socket: %v", err)
	}
	sockOpts := []socket.Option{socket.WithPeers(peers)}
	if s.cfg.SocketGroup != "" {
		sockOpts = append(sockOpts, socket.WithGroup(s.cfg.SocketGroup))
	}
	lis, err := socket.Listen(s.cfg.Socket, sockOpts...)
	if err != nil {
		if errors.Is(err, socket.ErrInUse) {
			return usage("%v (is another `microlet run` using run dir %s?)", err, s.cfg.RunDir)
		}
		return usage("supervisor socket: %v", err)
	}
	defer func() { _ = lis.Close() }()
	for _, c := range s.children {
		if c.external {
			continue
		}
		if p, _ := socket.PathFromEndpoint(c.endpoint); socket.Alive(p) {
			return usage("%s: the socket of %s is already served by a live process; stop it or use another run dir", p, c.name)
		}
		if err := os.MkdirAll(DataDir(s.cfg.DataDir, c.name), 0o750); err != nil {
			return usage("data_dir: %v", err)
		}
	}

	if s.cfg.MetricsAddr != "" {
		msrv, err := s.metrics.serve(s.cfg.MetricsAddr, s)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = msrv.Shutdown(sctx)
		}()
	}
	srv := grpcserver.New(s.log, grpcserver.WithReflection(s.cfg.Debug), grpcserver.WithRegistry(s.metrics.registry))
	supervisorv1.RegisterSupervisorServiceServer(srv.GRPC(), &api{s: s})
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(lis) }()
	s.log.Info("supervisor listening", "socket", s.cfg.Socket, "run_dir", s.cfg.RunDir, "node", s.cfg.NodeName,
		"standalone", s.cfg.Kubeconfig == "")

	// The node's credential first: the services start with a usable kubeconfig.
	credsCtx, cancelCreds := context.WithCancel(context.Background())
	defer cancelCreds()
	if nc, ok := s.cfg.NodeCredentials(); ok {
		nc.Log = s.log
		if err := nodecreds.Ensure(ctx, nc); err != nil {
			srv.Stop(time.Second)
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("node credentials: %w", err)
		}
		if nodecreds.Owned(nc) {
			r, err := nodecreds.NewRotator(credsCtx, nc)
			if err != nil {
				srv.Stop(time.Second)
				return fmt.Errorf("node credentials: %w", err)
			}
			go r.Run(credsCtx)
		} else {
			s.log.Warn("kubeconfig was not written by the supervisor; its credential is not rotated", "kubeconfig", nc.Kubeconfig)
		}
	}

	go s.spawner()
	defer close(s.spawns) // after every child is gone (deferred calls run last-in first-out)
	runCtx, cancelRun := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range s.children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.supervise(runCtx, c)
		}()
	}
	allReady := make(chan struct{})
	go func() {
		for _, c := range s.children {
			select {
			case <-c.ready:
			case <-runCtx.Done():
				return
			}
		}
		close(allReady)
	}()

	var result error
	for done := false; !done; {
		select {
		case <-ctx.Done():
			s.log.Info("stopping services", "reason", "shutdown requested")
			done = true
		case result = <-s.fatal:
			s.log.Error("stopping services", "reason", result)
			done = true
		case err := <-serveErr:
			result = fmt.Errorf("supervisor socket: %w", err)
			done = true
		case <-allReady:
			allReady = nil
			srv.SetServing(true)
			s.log.Info("all services serving")
			memtrim.AfterStartup(ctx, s.log)
		}
	}

	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	cancelRun()
	for i := len(s.children) - 1; i >= 0; i-- {
		s.stop(s.children[i])
	}
	wg.Wait()
	s.removeLeftSockets()
	srv.Stop(time.Second)
	s.log.Info("supervisor stopped")
	return result
}

// supervise keeps one component running (or, if external, watches it).
func (s *Supervisor) supervise(ctx context.Context, c *child) {
	for _, n := range c.needs {
		dep := s.byName[n]
		select {
		case <-dep.ready:
		case <-ctx.Done():
			return
		}
	}
	if c.external {
		s.watchExternal(ctx, c)
		return
	}
	bo := s.newBackoff()
	for {
		p, err := s.start(c)
		if errors.Is(err, errStopping) {
			return
		}
		var exit string
		up := time.Duration(0)
		if err != nil {
			exit = err.Error()
			s.log.Error("cannot start service", "component", c.name, "err", err)
		} else {
			sctx, cancel := context.WithCancel(ctx)
			go s.awaitServing(sctx, c, p)
			<-p.done
			cancel()
			select {
			case <-p.outDone:
			case <-time.After(time.Second): // a grandchild may hold the pipes
			}
			if ctx.Err() != nil {
				return // stop() reports it
			}
			up = s.clock.Since(p.started)
			exit = describeExit(p.state)
			if line := p.last.get(); line != "" && p.state.ExitCode() > 0 {
				exit += ": " + line
			}
			s.emit(Event{Type: EventExited, Component: c.name, PID: p.pid, Exit: exit})
			s.log.Warn("service exited", "component", c.name, "pid", p.pid, "uptime", up.Round(time.Millisecond), "exit", exit)
			if p.state.ExitCode() == 2 && !s.isReady(c) {
				// Status 2 is a usage error; restarting cannot fix it.
				s.fatal <- usage("%s exited with status 2 before serving: %s", c.name, p.last.get())
				return
			}
		}
		s.mu.Lock()
		c.lastExit = exit
		s.mu.Unlock()
		if up >= s.cfg.RestartBackoffReset {
			bo = s.newBackoff()
		}
		d := bo.Step()
		s.emit(Event{Type: EventRestarting, Component: c.name, Delay: d})
		s.log.Info("restarting service", "component", c.name, "delay", d)
		select {
		case <-s.clock.After(d):
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
		c.restarts++
		s.mu.Unlock()
		s.metrics.restarts.WithLabelValues(c.name).Inc()
	}
}

func (s *Supervisor) newBackoff() *wait.Backoff {
	return &wait.Backoff{
		Duration: s.cfg.RestartBackoff,
		Factor:   2,
		Steps:    math.MaxInt32,
		Cap:      s.cfg.RestartBackoffMax,
	}
}

var errStopping = errors.New("supervisor is stopping")

// start launches c's binary in its own process group, so a terminal's Ctrl-C
// reaches only the supervisor, which stops the children in order. Pdeathsig
// kills the child if the supervisor dies without stopping it.
func (s *Supervisor) start(c *child) (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, errStopping
	}
	cmd := exec.Command(c.binary, c.args...)
	if c.argv0 != "" {
		cmd.Args[0] = c.argv0 // picks the service in microlet-services
	}
	cmd.Env = c.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &process{cmd: cmd, done: make(chan struct{}), outDone: make(chan struct{}), last: &lastLine{}}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		_ = outR.Close()
		_ = outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = s.spawn(cmd)
	_ = outW.Close()
	_ = errW.Close()
	if err != nil {
		_ = outR.Close()
		_ = errR.Close()
		return nil, fmt.Errorf("start %s: %w", c.binary, err)
	}
	p.pid = cmd.Process.Pid
	p.started = s.clock.Now()
	prefix := fmt.Sprintf("%-*s | ", s.nameWidth(), c.name)
	var copiers sync.WaitGroup
	copiers.Add(2)
	go func() { defer copiers.Done(); s.copyLines(outR, s.stdout, prefix, nil) }()
	go func() { defer copiers.Done(); s.copyLines(errR, s.stderr, prefix, p.last) }()
	go func() { copiers.Wait(); close(p.outDone) }()
	s.metrics.up.WithLabelValues(c.name).Set(1)
	go func() {
		_ = cmd.Wait()
		p.state = cmd.ProcessState
		s.metrics.up.WithLabelValues(c.name).Set(0)
		close(p.done)
	}()
	c.proc = p
	s.log.Info("service started", "component", c.name, "pid", p.pid, "restarts", c.restarts)
	s.emitLocked(Event{Type: EventStarted, Component: c.name, PID: p.pid})
	return p, nil
}

func (s *Supervisor) nameWidth() int {
	w := 0
	for _, c := range components.All {
		w = max(w, len(c.Name))
	}
	return w
}

// awaitServing waits for p's first SERVING and marks c ready.
func (s *Supervisor) awaitServing(ctx context.Context, c *child, p *process) {
	cc, err := grpcclient.Dial(c.endpoint)
	if err != nil {
		s.log.Error("cannot probe service", "component", c.name, "err", err)
		return
	}
	defer func() { _ = cc.Close() }()
	if err := grpcclient.WaitServing(ctx, cc, ""); err != nil {
		return
	}
	s.log.Info("service serving", "component", c.name, "pid", p.pid, "after", s.clock.Since(p.started).Round(time.Millisecond))
	s.emit(Event{Type: EventServing, Component: c.name, PID: p.pid})
	c.readyMu.Do(func() { close(c.ready) })
}

// watchExternal waits until the external component answers SERVING, so its
// dependents start only then; afterwards `status` probes it on demand.
func (s *Supervisor) watchExternal(ctx context.Context, c *child) {
	s.log.Info("waiting for external service", "component", c.name, "endpoint", c.endpoint)
	delay := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 2 * time.Second}.DelayFunc()
	lastLog := s.clock.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r := probe.Health(pctx, c.endpoint)
		cancel()
		if r.Health == supervisorv1.Health_HEALTH_SERVING {
			s.log.Info("external service serving", "component", c.name, "endpoint", c.endpoint)
			s.emit(Event{Type: EventServing, Component: c.name})
			c.readyMu.Do(func() { close(c.ready) })
			return
		}
		if s.clock.Since(lastLog) > 10*time.Second {
			s.log.Warn("external service not serving yet", "component", c.name, "endpoint", c.endpoint, "err", r.Err)
			lastLog = s.clock.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.clock.After(delay()):
		}
	}
}

// stop ends c's process: SIGTERM to its group, then SIGKILL after the deadline.
func (s *Supervisor) stop(c *child) {
	s.mu.Lock()
	p := c.proc
	s.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return // already gone; supervise reported it
	default:
	}
	s.log.Info("stopping service", "component", c.name, "pid", p.pid)
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	t := s.clock.NewTimer(s.cfg.StopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C():
		s.log.Warn("service did not stop in time; killing it", "component", c.name, "pid", p.pid, "stop_timeout", s.cfg.StopTimeout)
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.done
	}
	// Whatever is left of the group (grandchildren) goes too.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	select {
	case <-p.outDone:
	case <-time.After(time.Second):
	}
	exit := describeExit(p.state)
	s.mu.Lock()
	c.lastExit = exit
	s.mu.Unlock()
	s.log.Info("service stopped", "component", c.name, "pid", p.pid, "exit", exit)
	s.emit(Event{Type: EventStopped, Component: c.name, PID: p.pid, Exit: exit})
}

// removeLeftSockets unlinks sockets of our children that nobody serves any
// more (a child killed with SIGKILL cannot unlink its own).
func (s *Supervisor) removeLeftSockets() {
	for _, c := range s.children {
		if c.external {
			continue
		}
		p, err := socket.PathFromEndpoint(c.endpoint)
		if err != nil || filepath.Dir(p) != filepath.Clean(s.cfg.RunDir) {
			continue
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSocket != 0 && !socket.Alive(p) {
			_ = os.Remove(p)
		}
	}
}

func (s *Supervisor) isReady(c *child) bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

func (s *Supervisor) emit(e Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitLocked(e)
}

func (s *Supervisor) emitLocked(e Event) {
	if s.onEvent == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = s.clock.Now()
	}
	s.onEvent(e)
}

func describeExit(st *os.ProcessState) string {
	if st == nil {
		return "unknown"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "signal: " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", st.ExitCode())
}

type spawnRequest struct {
	cmd *exec.Cmd
	err chan error
}

// spawner starts every child from one locked OS thread that lives until all
// children are gone: Linux sends Pdeathsig when the *thread* that forked a
// child exits, and Go may end threads; this one only ends after Run.
func (s *Supervisor) spawner() {
	runtime.LockOSThread()
	for r := range s.spawns {
		r.err <- r.cmd.Start()
	}
}

func (s *Supervisor) spawn(cmd *exec.Cmd) error {
	r := spawnRequest{cmd: cmd, err: make(chan error, 1)}
	s.spawns <- r
	return <-r.err
}
