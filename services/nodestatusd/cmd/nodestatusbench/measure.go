package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/services/nodestatusd/internal/simulate"
)

// The agents the bench compares.
const (
	agentMicrolet = "microlet"
	agentKwok     = "kwok"
)

// simulatedNodeIP is the InternalIP of every simulated node.
const simulatedNodeIP = "10.0.0.1"

// result is one agent's measurement at one node count.
type result struct {
	agent  string
	nodes  int
	ready  int // nodes Ready when measuring began
	leases int // Leases present when measuring began
	warmup time.Duration
	// warmupCPU is the agent's CPU seconds from start to all Ready.
	warmupCPU  float64
	window     time.Duration
	writes     map[string]float64 // "resource[/sub] VERB" -> count in window
	cpuSeconds float64
	rssAvg     int64
	rssPeak    int64 // highest sample in the window
	hwm        int64 // VmHWM: peak since the agent started
	load       [2]string
}

func (r result) writesPerSecond() float64 {
	total := 0.0
	for _, v := range r.writes {
		total += v
	}
	return total / r.window.Seconds()
}

// nodeName is the name of node i of a run, the same scheme as nodestatussim's.
func nodeName(prefix string, i int) string { return simulate.Name(prefix, i) }

// measure runs one agent with n nodes: start, warm up, measure, stop, and
// delete its Nodes and Leases so the next run starts from the same state.
func (e *benchEnv) measure(ctx context.Context, agent string, n int) (result, error) {
	e.runs++
	prefix := fmt.Sprintf("%c%d", agent[0], e.runs)
	r := result{agent: agent, nodes: n, window: e.opts.duration}
	logPath := filepath.Join(e.dir, prefix+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return r, err
	}
	defer func() { _ = logFile.Close() }()

	var cmd *exec.Cmd
	var selector, pprofURL string
	switch agent {
	case agentMicrolet:
		runDir := filepath.Join(e.dir, prefix)
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			return r, err
		}
		selector = simulate.LabelPrefix + "=" + prefix
		args := []string{"--kubeconfig", e.kubeconfig, "--run-dir", runDir,
			"--nodes", strconv.Itoa(n), "--prefix", prefix,
			"--runtime-endpoint", "unix://" + e.criSock, "--log-level", "warn",
			// As for kwok's nodes, one address for all: resolving
			// thousands of made-up host names measures the resolver.
			"--node-ip", simulatedNodeIP}
		if e.opts.profileDir != "" {
			port, err := freePort()
			if err != nil {
				return r, err
			}
			pprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", port)
			args = append(args, "--pprof-addr", fmt.Sprintf("127.0.0.1:%d", port))
		}
		cmd = exec.Command(e.nodestatussim, args...)
	case agentKwok:
		selector = kwokLabel + "=" + prefix
		cmd = exec.Command(e.kwok, "--kubeconfig", e.kubeconfig, "--config", e.kwokConfig,
			"--manage-nodes-with-label-selector", selector,
			// The kubelet's lease: 40 s, renewed every quarter with 4 % jitter.
			"--node-lease-duration-seconds", "40", "-v", "WARN") // the same log level as nodestatussim
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf("%s, %d nodes: starting (log %s)", agent, n, logPath)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		stopProcess(cmd, exited)
		logf("%s, %d nodes: deleting its Nodes and Leases", agent, n)
		if err := e.cleanup(context.WithoutCancel(ctx), selector); err != nil {
			logf("cleanup: %v", err)
		}
	}()
	pid := cmd.Process.Pid

	if agent == agentKwok {
		if err := createKwokNodes(ctx, e.admin, prefix, n); err != nil {
			return r, err
		}
		logf("kwok, %d nodes: created them in %s", n, time.Since(start).Round(time.Second))
	}

	limit := e.opts.warmup
	if limit == 0 {
		limit = 5*time.Minute + time.Duration(n)*100*time.Millisecond
	}
	deadline := start.Add(limit)
	for {
		r.ready, r.leases, err = e.count(ctx, selector, prefix)
		if err != nil {
			logf("counting: %v", err)
		}
		if r.ready == n && r.leases == n {
			break
		}
		select {
		case <-exited:
			return r, fmt.Errorf("%s exited during warm-up; see %s", agent, logPath)
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(5 * time.Second):
		}
		if time.Now().After(deadline) {
			// Measure anyway: an overloaded control plane is a result too.
			logf("%s, %d nodes: only %d Ready and %d Leases after %s; measuring anyway", agent, n, r.ready, r.leases, time.Since(start).Round(time.Second))
			break
		}
		logf("%s, %d nodes: %d Ready, %d Leases after %s", agent, n, r.ready, r.leases, time.Since(start).Round(time.Second))
	}
	r.warmup = time.Since(start)
	if r.warmupCPU, err = cpuSeconds(pid); err != nil {
		return r, err
	}
	logf("%s, %d nodes: warm-up done in %s (%.1f CPU-s); settling %s, then measuring %s", agent, n, r.warmup.Round(time.Second), r.warmupCPU, e.opts.settle, e.opts.duration)
	if err := sleep(ctx, e.opts.settle); err != nil {
		return r, err
	}

	before, err := scrape(ctx, e.admin)
	if err != nil {
		return r, err
	}
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return r, err
	}
	r.load[0] = loadAvg()
	t0 := time.Now()
	if e.opts.profileDir != "" {
		go e.profile(ctx, fmt.Sprintf("%s-%d", agent, n), pprofURL)
	}
	var samples []int64
	for end := t0.Add(e.opts.duration); time.Now().Before(end); {
		if v, _, err := memory(pid); err == nil {
			samples = append(samples, v)
		}
		select {
		case <-exited:
			return r, fmt.Errorf("%s exited while measuring; see %s", agent, logPath)
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(min(2*time.Second, time.Until(end))):
		}
	}
	after, err := scrape(ctx, e.admin)
	if err != nil {
		return r, err
	}
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		return r, err
	}
	r.window = time.Since(t0)
	if pprofURL != "" {
		saveURL(ctx, pprofURL+"heap", filepath.Join(e.opts.profileDir, fmt.Sprintf("nodestatussim-%d.heap", n)))
	}
	r.load[1] = loadAvg()
	r.cpuSeconds = cpu1 - cpu0
	if _, r.hwm, err = memory(pid); err != nil {
		return r, err
	}
	var sum int64
	for _, v := range samples {
		sum += v
		r.rssPeak = max(r.rssPeak, v)
	}
	if len(samples) > 0 {
		r.rssAvg = sum / int64(len(samples))
	}
	r.writes = map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			r.writes[k] = d
		}
	}
	logf("%s, %d nodes: %.2f writes/s, %.1f CPU-s, RSS avg %.0f MiB (load %s)", agent, n, r.writesPerSecond(), r.cpuSeconds, float64(r.rssAvg)/(1<<20), r.load[1])
	return r, nil
}

// count returns how many Nodes matching selector are Ready and how many
// Leases of the run exist.
func (e *benchEnv) count(ctx context.Context, selector, prefix string) (ready, leases int, err error) {
	nodes, err := e.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
	if err != nil {
		return 0, 0, err
	}
	for _, node := range nodes.Items {
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	ls, err := e.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return ready, 0, err
	}
	for _, l := range ls.Items {
		if strings.HasPrefix(l.Name, prefix+"-") {
			leases++
		}
	}
	return ready, leases, nil
}

// cleanup deletes a run's Nodes and every node Lease (only node Leases
// live in kube-node-lease), so runs do not pile up objects.
func (e *benchEnv) cleanup(ctx context.Context, selector string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := e.admin.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: selector}); err != nil {
		return err
	}
	return e.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

// stopProcess sends SIGTERM and kills after 30 s.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
