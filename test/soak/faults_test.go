package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv/node"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// injector breaks the node on a schedule: a random service SIGKILLed every
// 15–60 s, and once each: the runtime restarted, the API server stopped,
// the data disk filled.
type injector struct {
	n      *node.Node
	sup    supervisorv1.SupervisorServiceClient
	rand   *rand.Rand
	apiPID int
	// outage is how long the API server stays stopped and the disk full.
	outage time.Duration
	logf   func(format string, args ...any)

	// round is the services still to kill in this round.
	round []string

	mu     sync.Mutex
	counts map[string]int
	// failures are faults that could not be injected.
	failures []string
}

func newInjector(n *node.Node, seed uint64, outage time.Duration, logf func(string, ...any)) (*injector, error) {
	cc, err := grpcclient.Dial(filepath.Join(n.RunDir, "microlet.sock"))
	if err != nil {
		return nil, err
	}
	pid := n.CP.APIServerPID()
	if pid == 0 {
		return nil, errors.New("the control plane's kube-apiserver has no process")
	}
	return &injector{n: n, sup: supervisorv1.NewSupervisorServiceClient(cc), rand: rand.New(rand.NewPCG(seed, ^seed)),
		apiPID: pid, outage: outage, logf: logf, counts: map[string]int{}}, nil
}

// components is the supervisor's view of the node's services.
func (f *injector) components(ctx context.Context) (map[string]*supervisorv1.Component, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return node.Components(cctx, f.sup)
}

// run injects faults until ctx ends (the run's fault phase, d long).
func (f *injector) run(ctx context.Context, d time.Duration) {
	start := time.Now()
	once := []struct {
		at     time.Duration
		inject func(context.Context) error
		name   string
	}{
		{d / 4, f.restartRuntime, "runtime restart"},
		{d * 9 / 20, f.stopAPIServer, "API server stopped"},
		{d * 13 / 20, f.fillDisk, "data disk full"},
	}
	killAt := time.Now().Add(f.killDelay())
	for {
		wait := time.Until(killAt)
		if len(once) > 0 {
			wait = min(wait, time.Until(start.Add(once[0].at)))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, 0)):
		}
		if len(once) > 0 && !time.Now().Before(start.Add(once[0].at)) {
			o := once[0]
			once = once[1:]
			f.record(o.name, o.inject(ctx))
			continue
		}
		if time.Now().Before(killAt) {
			continue
		}
		name, err := f.killRandom(ctx)
		f.record("SIGKILL "+name, err)
		killAt = time.Now().Add(f.killDelay())
	}
}

func (f *injector) killDelay() time.Duration {
	return 15*time.Second + time.Duration(f.rand.Int64N(int64(45*time.Second)))
}

func (f *injector) record(what string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.failures = append(f.failures, fmt.Sprintf("%s: %v", what, err))
		f.logf("fault %s not injected: %v", what, err)
		return
	}
	f.counts[what]++
}

// killRandom SIGKILLs one of the node's services, which the supervisor
// starts again. The victims come in shuffled rounds, so a long run kills
// every service about equally often.
func (f *injector) killRandom(ctx context.Context) (string, error) {
	cs, err := f.components(ctx)
	if err != nil {
		return "a service", err
	}
	if len(f.round) == 0 {
		for name := range cs {
			f.round = append(f.round, name)
		}
		sort.Strings(f.round)
		f.rand.Shuffle(len(f.round), func(i, j int) { f.round[i], f.round[j] = f.round[j], f.round[i] })
	}
	// A service the supervisor is still starting again waits for the
	// next turn.
	var name string
	var pid int32
	for range f.round {
		name, f.round = f.round[0], f.round[1:]
		if pid = cs[name].GetPid(); pid != 0 {
			break
		}
		f.round = append(f.round, name)
	}
	if pid == 0 {
		return "a service", errors.New("no service has a process")
	}
	f.logf("fault: SIGKILL %s (pid %d)", name, pid)
	return name, syscall.Kill(int(pid), syscall.SIGKILL)
}

// restartRuntime stops the node's container runtime gracefully (SIGTERM
// to runtime-shim, which the supervisor restarts) and waits until it
// serves again. The host's Docker daemon is shared with everything else on
// this machine and is not restarted; runtime-shim is the runtime podsyncd
// talks to.
func (f *injector) restartRuntime(ctx context.Context) error {
	cs, err := f.components(ctx)
	if err != nil {
		return err
	}
	old := cs["runtime-shim"].GetPid()
	if old == 0 {
		return errors.New("runtime-shim has no process")
	}
	f.logf("fault: restart the runtime (SIGTERM runtime-shim pid %d)", old)
	if err := syscall.Kill(int(old), syscall.SIGTERM); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
		if cs, err := f.components(ctx); err == nil {
			if c := cs["runtime-shim"]; c.GetPid() != 0 && c.GetPid() != old && c.GetHealth() == supervisorv1.Health_HEALTH_SERVING {
				return nil
			}
		}
	}
	return errors.New("runtime-shim did not serve again within 2 minutes")
}

// stopAPIServer stops (SIGSTOP) the API server for the outage and then
// continues it: every client's requests hang, as behind a dead network.
func (f *injector) stopAPIServer(ctx context.Context) error {
	f.logf("fault: SIGSTOP kube-apiserver (pid %d) for %s", f.apiPID, f.outage)
	if err := syscall.Kill(f.apiPID, syscall.SIGSTOP); err != nil {
		return err
	}
	defer func() {
		if err := syscall.Kill(f.apiPID, syscall.SIGCONT); err != nil {
			f.logf("SIGCONT kube-apiserver: %v", err)
		}
		f.logf("fault over: kube-apiserver continued")
	}()
	sleep(ctx, f.outage)
	return nil
}

// fillDisk fills the node's data dir (a tmpfs of its own) until the
// filesystem has no space left, keeps it full for the outage, and frees it.
func (f *injector) fillDisk(ctx context.Context) error {
	path := filepath.Join(f.n.DataDir, "soak-filler")
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		_ = file.Close()
		if err := os.Remove(path); err != nil {
			f.logf("free the data disk: %v", err)
		}
		f.logf("fault over: data disk freed")
	}()
	buf := make([]byte, 1<<20)
	var written int64
	for {
		n, err := file.Write(buf)
		written += int64(n)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return err
		}
	}
	f.logf("fault: data disk full (%d MiB written) for %s", written>>20, f.outage)
	sleep(ctx, f.outage)
	return nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// injected copies the fault counts and failures.
func (f *injector) injected() (map[string]int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	counts := make(map[string]int, len(f.counts))
	for k, v := range f.counts {
		counts[k] = v
	}
	return counts, append([]string(nil), f.failures...)
}
