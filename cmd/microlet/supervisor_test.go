package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/microlet/microlet/cmd/microlet/internal/supervisor"
	"github.com/microlet/microlet/internal/components"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// recorder keeps a supervisor's events for the test to inspect.
type recorder struct {
	mu     sync.Mutex
	events []supervisor.Event
}

func (r *recorder) add(e supervisor.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []supervisor.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]supervisor.Event(nil), r.events...)
}

// find returns the first event after index from matching f, and its index.
func (r *recorder) find(from int, f func(supervisor.Event) bool) (supervisor.Event, int) {
	for i, e := range r.snapshot() {
		if i >= from && f(e) {
			return e, i
		}
	}
	return supervisor.Event{}, -1
}

func (r *recorder) wait(t *testing.T, what string, from int, f func(supervisor.Event) bool) (supervisor.Event, int) {
	t.Helper()
	var e supervisor.Event
	i := -1
	eventually(t, what, func() bool {
		e, i = r.find(from, f)
		return i >= 0
	})
	return e, i
}

func is(typ supervisor.EventType, name string) func(supervisor.Event) bool {
	return func(e supervisor.Event) bool { return e.Type == typ && e.Component == name }
}

// TestKilledServiceIsRestarted runs the supervisor in the test process (so
// the race detector sees its goroutines) with the real service binaries.
// SIGKILL of a service brings it back SERVING after the first backoff delay,
// a second crash soon after waits twice as long, and nothing else is touched.
func TestKilledServiceIsRestarted(t *testing.T) {
	t.Parallel()
	cfg := supervisor.DefaultConfig()
	cfg.RunDir = shortDir(t)
	cfg.DataDir = t.TempDir()
	cfg.BinDir = binDir
	cfg.NodeName = "test-node"
	cfg.ManifestDir = t.TempDir()
	cfg.KubeletPort = 0 // parallel tests; the default 10250 may be taken
	rec := &recorder{}
	s, err := supervisor.New(cfg,
		supervisor.WithEvents(rec.add),
		supervisor.WithOutput(io.Discard, io.Discard),
		supervisor.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()

	// Start order from the events: each service starts after its needs serve.
	for _, c := range components.All {
		_, started := rec.wait(t, c.Name+" started", 0, is(supervisor.EventStarted, c.Name))
		for _, n := range c.Needs {
			if _, served := rec.find(0, is(supervisor.EventServing, n)); served < 0 || served > started {
				t.Errorf("%s started (event %d) before %s served (event %d)", c.Name, started, n, served)
			}
		}
	}
	for _, c := range components.All {
		rec.wait(t, c.Name+" serving", 0, is(supervisor.EventServing, c.Name))
	}
	before := map[string]*supervisorv1.Component{}
	for _, c := range s.Components(ctx) {
		before[c.GetName()] = c
	}

	kill := func(name string, from int) (supervisor.Event, int) {
		t.Helper()
		var pid int32
		for _, c := range s.Components(ctx) {
			if c.GetName() == name {
				pid = c.GetPid()
			}
		}
		if pid == 0 {
			t.Fatalf("%s has no pid", name)
		}
		if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		exited, i := rec.wait(t, name+" exited", from, is(supervisor.EventExited, name))
		if exited.PID != int(pid) || exited.Exit != "signal: killed" {
			t.Errorf("exit event %+v, want pid %d killed", exited, pid)
		}
		restart, i := rec.wait(t, name+" restarting", i, is(supervisor.EventRestarting, name))
		_, i = rec.wait(t, name+" serving again", i, func(e supervisor.Event) bool {
			return e.Type == supervisor.EventServing && e.Component == name && e.PID != int(pid)
		})
		return restart, i
	}

	restart, i := kill(components.PodConfig, 0)
	if restart.Delay != 500*time.Millisecond {
		t.Errorf("first restart delay %s, want 500ms", restart.Delay)
	}
	for _, c := range s.Components(ctx) {
		if c.GetName() == components.PodConfig && (c.GetRestarts() != 1 || c.GetHealth() != supervisorv1.Health_HEALTH_SERVING) {
			t.Errorf("podconfig after one kill: %v, want SERVING with restarts=1", c)
		}
	}
	// A crash within restart_backoff_reset of the restart doubles the delay.
	restart, _ = kill(components.PodConfig, i)
	if restart.Delay != time.Second {
		t.Errorf("second restart delay %s, want 1s", restart.Delay)
	}

	for _, c := range s.Components(ctx) {
		b := before[c.GetName()]
		switch c.GetName() {
		case components.PodConfig:
			if c.GetRestarts() != 2 || c.GetPid() == b.GetPid() || c.GetHealth() != supervisorv1.Health_HEALTH_SERVING {
				t.Errorf("podconfig after two kills: %v", c)
			}
			if c.GetLastExit() != "signal: killed" {
				t.Errorf("podconfig last_exit %q", c.GetLastExit())
			}
		default:
			if c.GetRestarts() != 0 || c.GetPid() != b.GetPid() || c.GetHealth() != supervisorv1.Health_HEALTH_SERVING {
				t.Errorf("%s was touched: before %v, after %v", c.GetName(), b, c)
			}
		}
	}

	cancel()
	select {
	case err := <-runErr:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Run did not return after cancel")
	}
	var stopped []string
	for _, e := range rec.snapshot() {
		if e.Type == supervisor.EventStopped {
			stopped = append(stopped, e.Component)
			if e.Exit != "exit status 0" {
				t.Errorf("%s stopped with %q, want a clean exit", e.Component, e.Exit)
			}
		}
	}
	for i, name := range stopped {
		if want := components.All[len(components.All)-1-i].Name; name != want {
			t.Errorf("stop order %v is not the reverse of the start order", stopped)
			break
		}
	}
	if len(stopped) != len(components.All) {
		t.Errorf("stopped %v, want all %d", stopped, len(components.All))
	}
	if left := sockets(t, cfg.RunDir); len(left) > 0 {
		t.Errorf("sockets left: %v", left)
	}
}
