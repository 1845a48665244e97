package benchvs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/test/conformance"
)

// Agent names.
const (
	Microlet = "microlet"
	Kubelet  = "kubelet"
)

// Options are one run's inputs.
type Options struct {
	// Kubelet is the upstream kubelet binary (hack/build-kubelet.sh).
	Kubelet string
	// Agents are the agents to measure, in order (Microlet, Kubelet).
	Agents []string
	// Batches are the sizes of the pod batches created at once.
	Batches []int
	// IdleWindow is how long the idle node (and the baseline) is measured.
	IdleWindow time.Duration
	// SteadyPods pods Running are measured for SteadyWindow.
	SteadyPods   int
	SteadyWindow time.Duration
	// ChurnRate pods a second are created for ChurnWindow, each deleted
	// once Running (ChurnWindow 0: no churn).
	ChurnRate   float64
	ChurnWindow time.Duration
	// Results receives the binaries and the agents' logs.
	Results string
	// Command is recorded as how the run was made.
	Command string
	// Out receives progress.
	Out io.Writer
}

// settle is how long an agent runs after its Node is Ready before the
// idle window starts (the first node status, image and pod listings).
const settle = 15 * time.Second

// bench is a run in progress.
type bench struct {
	Options
	began time.Time
	cp    *controlplane.ControlPlane
	admin kubernetes.Interface
	bins  string
	image string
	rec   *Record
}

func (b *bench) step(format string, a ...any) {
	fmt.Fprintf(b.Out, "benchvs: %s: %s\n", time.Since(b.began).Round(time.Second), fmt.Sprintf(format, a...))
}

// Run builds microlet, starts a registry holding the pods' image and a
// control plane, measures a baseline window with no agent, then each agent
// in turn (started, measured, stopped and its containers removed), and
// returns the record.
func Run(ctx context.Context, o Options) (*Record, error) {
	b := &bench{Options: o, began: time.Now()}
	if b.Out == nil {
		b.Out = io.Discard
	}
	repo, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	version := commandOutput("git", "-C", repo, "describe", "--tags", "--always", "--dirty")
	b.rec = &Record{
		Started: b.began.UTC(), Command: o.Command, Microlet: version,
		Host: Host{
			Kernel: commandOutput("uname", "-r"), CPUs: runtime.NumCPU(),
			Docker: "Docker " + commandOutput("docker", "version", "--format", "{{.Server.Version}}") + " (" + commandOutput("docker", "info", "--format", "{{.Driver}}") + ")",
			Cgroup: "cgroup v" + commandOutput("docker", "info", "--format", "{{.CgroupVersion}}"),
		},
		Settings: Settings{Batches: o.Batches, IdleSeconds: o.IdleWindow.Seconds(), SteadyPods: o.SteadyPods, SteadySeconds: o.SteadyWindow.Seconds()},
	}
	if o.ChurnWindow > 0 {
		b.rec.Settings.ChurnRate, b.rec.Settings.ChurnSeconds = o.ChurnRate, o.ChurnWindow.Seconds()
	}
	if o.Kubelet != "" {
		b.rec.Kubelet = commandOutput(o.Kubelet, "--version")
	}
	if err := os.MkdirAll(o.Results, 0o755); err != nil {
		return nil, err
	}

	b.bins = filepath.Join(o.Results, "bin")
	b.step("building microlet %s into %s", version, b.bins)
	if err := goBuild(ctx, repo, b.bins, append(node.Packages(), "github.com/microlet/microlet/services/runtime-shim/pause")...); err != nil {
		return nil, err
	}

	reg, err := registry.New(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = reg.Close()
		removeImages(reg.DockerImageFilter())
	}()
	b.image = reg.Image(registry.Busybox)
	b.rec.Settings.Image = registry.Busybox + " (local registry on 127.0.0.1)"

	b.step("starting etcd and kube-apiserver")
	if b.cp, err = controlplane.Start(ctx, controlplane.Options{}); err != nil {
		return nil, err
	}
	defer func() {
		if err := b.cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "benchvs: stop control plane:", err)
		}
	}()
	if err := b.cp.EnsureNamespace(ctx, namespace); err != nil {
		return nil, err
	}
	cfg := b.cp.AdminConfig()
	// Batches are created at once; client-go's default 5 QPS would pace them.
	cfg.QPS, cfg.Burst = 1000, 1000
	if b.admin, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}

	// The API server's start-up requests (its Service, IP addresses)
	// settle before the baseline.
	b.step("control plane up; settling %s, then baseline: %s with no agent", settle, o.IdleWindow)
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	none := &started{groups: func(processTable) ([]int, []int) { return nil, nil }}
	if b.rec.Baseline, err = b.window(ctx, none, o.IdleWindow, 0); err != nil {
		return nil, err
	}
	for _, name := range o.Agents {
		run, err := b.agent(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		b.rec.Agents = append(b.rec.Agents, run)
	}
	return b.rec, nil
}

// agent starts one agent, measures it and stops it.
func (b *bench) agent(ctx context.Context, name string) (AgentRun, error) {
	run := AgentRun{Name: name}
	// The image is in Docker before the agent starts: no pod pulls.
	if out, err := exec.CommandContext(ctx, "docker", "pull", "-q", b.image).CombinedOutput(); err != nil {
		return run, fmt.Errorf("docker pull %s: %v: %s", b.image, err, out)
	}
	var a *started
	var err error
	switch name {
	case Microlet:
		a, err = b.startMicrolet(ctx)
	case Kubelet:
		a, err = b.startKubelet(ctx)
	default:
		err = fmt.Errorf("unknown agent %q (microlet, kubelet)", name)
	}
	if err != nil {
		return run, err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			a.stop()
		}
	}
	defer stop()
	b.step("%s: node %s Ready; settling %s", name, a.node, settle)
	if err := sleep(ctx, settle); err != nil {
		return run, err
	}

	b.step("%s: idle window %s", name, b.IdleWindow)
	if run.Idle, err = b.window(ctx, a, b.IdleWindow, 0); err != nil {
		return run, err
	}
	for _, n := range b.Batches {
		b.step("%s: batch of %d pods", name, n)
		batch, err := runBatch(ctx, b.admin, a.node, b.image, n)
		if err != nil {
			return run, fmt.Errorf("batch of %d: %w", n, err)
		}
		b.step("%s: %d pods: Running p50 %.2f s p99 %.2f s, Ready p99 %.2f s, %.2f pods/s; deleted p99 %.2f s",
			name, n, batch.Running.P50, batch.Running.P99, batch.Ready.P99, batch.PodsPerSecond, batch.Deleted.P99)
		run.Batches = append(run.Batches, batch)
	}
	if b.SteadyPods > 0 {
		b.step("%s: steady state: %d pods, window %s", name, b.SteadyPods, b.SteadyWindow)
		if run.Steady, err = b.steady(ctx, a); err != nil {
			return run, err
		}
	}
	if b.ChurnWindow > 0 {
		b.step("%s: settling %s, then churn: %g pods/s for %s", name, settle, b.ChurnRate, b.ChurnWindow)
		if err := sleep(ctx, settle); err != nil {
			return run, err
		}
		if run.Churn, err = b.churn(ctx, a); err != nil {
			return run, fmt.Errorf("churn: %w", err)
		}
		c := run.Churn
		perPod, _ := Totals(c.RequestsPerPod)
		b.step("%s: churn: %d pods (%d rejected) in %.0f s: Running p50 %.2f s p99 %.2f s; agent %.3f cores; %.1f API requests/pod",
			name, c.Pods, c.Rejected, c.Window.Seconds, c.Running.P50, c.Running.P99, c.Window.AgentCPU, perPod)
	}
	stop()
	if run.Leftover, err = dockerContainers(a.instance); err != nil {
		return run, err
	}
	if run.Leftover != 0 {
		return run, fmt.Errorf("%d containers labelled %s left after stopping", run.Leftover, a.instance)
	}
	b.step("%s: stopped; no container of it left", name)
	return run, nil
}

// steady starts SteadyPods pods, measures the window and deletes them.
func (b *bench) steady(ctx context.Context, a *started) (Window, error) {
	t, err := watchPods(ctx, b.admin, a.node, nil)
	if err != nil {
		return Window{}, err
	}
	specs := make([]*corev1.Pod, b.SteadyPods)
	for i := range specs {
		specs[i] = benchPod(fmt.Sprintf("steady-%d", i), a.node, b.image)
	}
	if _, err := startPods(ctx, b.admin, t, specs); err != nil {
		t.stop()
		return Window{}, err
	}
	// No watch of the benchmark's is open during the window, which
	// starts after the pods' start-up events and status writes.
	t.stop()
	if err := sleep(ctx, settle); err != nil {
		return Window{}, err
	}
	w, err := b.window(ctx, a, b.SteadyWindow, len(specs))
	if err != nil {
		return w, err
	}
	if t, err = watchPods(ctx, b.admin, a.node, nil); err != nil {
		return w, err
	}
	defer t.stop()
	_, err = deletePods(ctx, b.admin, t, specs)
	return w, err
}

// window measures the agent over d with nothing else happening.
func (b *bench) window(ctx context.Context, a *started, d time.Duration, pods int) (Window, error) {
	return b.measureWhile(ctx, a, pods, func(ctx context.Context) error { return sleep(ctx, d) })
}

// measureWhile measures the agent's processes, the API server's request counts
// and the agent's CRI calls while work runs.
func (b *bench) measureWhile(ctx context.Context, a *started, pods int, work func(context.Context) error) (Window, error) {
	w := Window{Pods: pods, Load: Load{Start: loadAverage()}}
	before, err := b.requests(ctx)
	if err != nil {
		return w, err
	}
	criBefore, err := a.criCalls(ctx)
	if err != nil {
		return w, err
	}
	start := time.Now()
	var agentCPU, runtimeCPU []map[int]float64
	var agentPSS, runtimePSS []float64
	take := func() {
		ag, rt := a.groups(readProcesses())
		as, rs := measure(ag), measure(rt)
		agentCPU, runtimeCPU = append(agentCPU, as.cpu), append(runtimeCPU, rs.cpu)
		agentPSS, runtimePSS = append(agentPSS, float64(as.pss)), append(runtimePSS, float64(rs.pss))
		w.AgentProcs = len(ag)
	}
	take()
	done := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { done <- work(wctx) }()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
loop:
	for {
		select {
		case <-tick.C:
			take()
		case err := <-done:
			if err != nil {
				return w, err
			}
			take()
			break loop
		}
	}
	elapsed := time.Since(start)
	after, err := b.requests(ctx)
	if err != nil {
		return w, err
	}
	criAfter, err := a.criCalls(ctx)
	if err != nil {
		return w, err
	}
	w.Seconds = elapsed.Seconds()
	w.AgentCPU = CPUSeconds(agentCPU) / w.Seconds
	w.RuntimeCPU = CPUSeconds(runtimeCPU) / w.Seconds
	w.AgentPSS, w.AgentPSSMax = MeanMax(agentPSS)
	w.RuntimePSS, _ = MeanMax(runtimePSS)
	w.Requests = PerMinute(before, after, elapsed)
	if criAfter != nil {
		w.CRICalls = PerMinute(criBefore, criAfter, elapsed)
	}
	w.Load.End = loadAverage()
	return w, nil
}

// requests scrapes the API server's request counters.
func (b *bench) requests(ctx context.Context) (map[string]float64, error) {
	body, err := b.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("API server metrics: %w", err)
	}
	m, err := testenv.ParseMetrics(body)
	if err != nil {
		return nil, err
	}
	return RequestCounts(m), nil
}

// started is a running agent.
type started struct {
	node, instance string
	groups         groups
	// shimMetrics is the address of its runtime-shim's --metrics-addr
	// ("": no runtime-shim, the baseline).
	shimMetrics string
	stop        func()
}

// criCalls is the agent's runtime-shim's CRI calls so far by method, nil
// without a runtime-shim.
func (a *started) criCalls(ctx context.Context) (map[string]float64, error) {
	if a.shimMetrics == "" {
		return nil, nil
	}
	return testenv.ScrapeCRICalls(ctx, a.shimMetrics)
}

// startMicrolet launches a microlet node with microlet's defaults and the
// flags every connected test node gets (node.ConnectedArgs: node IP
// 127.0.0.1, its own cgroup root and Docker label, no image GC).
func (b *bench) startMicrolet(ctx context.Context) (*started, error) {
	name := "microlet-" + rand.String(5)
	dir, err := os.MkdirTemp("/tmp", "benchvs-microlet-")
	if err != nil {
		return nil, err
	}
	shimMetrics, err := testenv.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(b.Results, "microlet.log"))
	if err != nil {
		return nil, err
	}
	cfg := node.Config{
		Name: name, Dir: dir, Bins: b.bins, Kubeconfig: b.cp.NodeKubeconfig(name),
		ClientCAFile: filepath.Join(b.cp.PKI().Dir, "ca.crt"), Instance: "benchvs-" + rand.String(8),
		Args: map[string][]string{components.RuntimeShim: {"--metrics-addr=" + shimMetrics}}, Out: log,
	}
	b.step("microlet: starting node %s (log: %s)", name, log.Name())
	p, err := node.Launch(cfg)
	if err != nil {
		_ = log.Close()
		return nil, err
	}
	a := &started{node: name, instance: cfg.Instance, groups: byRoots(p.PID(), 0), shimMetrics: shimMetrics, stop: func() {
		p.Stop(60 * time.Second)
		node.RemoveDockerObjects(cfg.Instance)
		_ = os.RemoveAll(dir)
		_ = log.Close()
	}}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	err = p.WaitServing(wctx)
	if err == nil {
		err = node.WaitReady(wctx, b.admin, name)
	}
	if err != nil {
		a.stop()
		return nil, fmt.Errorf("microlet node: %w (log: %s)", err, log.Name())
	}
	return a, nil
}

// startKubelet starts runtime-shim and the upstream kubelet as
// conformance.StartKubelet does, with the gateway of a Docker bridge
// network of the benchmark's own as the node IP.
func (b *bench) startKubelet(ctx context.Context) (*started, error) {
	if b.Kubelet == "" {
		return nil, errors.New("no kubelet binary (-kubelet, hack/build-kubelet.sh)")
	}
	shimMetrics, err := testenv.FreeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	network := "benchvs-" + rand.String(6)
	ip, err := createNetwork(ctx, network)
	if err != nil {
		return nil, err
	}
	b.rec.KubeletNodeIP = ip + ", the gateway of Docker bridge network " + network + " the benchmark creates (the kubelet refuses a loopback node IP; the address lives on a host bridge, so nothing leaves the machine)"
	kubeletLog, err := os.Create(filepath.Join(b.Results, "kubelet.log"))
	if err != nil {
		removeNetwork(network)
		return nil, err
	}
	shimLog, err := os.Create(filepath.Join(b.Results, "kubelet-runtime-shim.log"))
	if err != nil {
		removeNetwork(network)
		return nil, err
	}
	closeAll := func() {
		_ = kubeletLog.Close()
		_ = shimLog.Close()
		removeNetwork(network)
	}
	b.step("kubelet: starting runtime-shim and %s, node IP %s (logs: %s, %s)", b.rec.Kubelet, ip, kubeletLog.Name(), shimLog.Name())
	k, err := conformance.StartKubelet(ctx, b.cp, conformance.KubeletOptions{
		Kubelet: b.Kubelet, Bins: b.bins, Name: "kubelet-" + rand.String(5), NodeIP: ip,
		KubeletOut: kubeletLog, ShimOut: shimLog, ShimArgs: []string{"--metrics-addr=" + shimMetrics},
	})
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("%w (logs: %s, %s)", err, kubeletLog.Name(), shimLog.Name())
	}
	return &started{node: k.Name, instance: k.Instance, groups: byRoots(k.KubeletPID(), k.ShimPID()), shimMetrics: shimMetrics, stop: func() {
		k.Stop()
		if diff := k.RestoreReport(); diff != "" {
			fmt.Fprintf(os.Stderr, "benchvs: kernel parameters not restored: %s\n", diff)
		}
		closeAll()
	}}, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
