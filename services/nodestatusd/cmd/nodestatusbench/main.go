// Command nodestatusbench measures nodestatussim against a real
// control plane, side by side with kwok managing the same number of nodes.
//
// It starts etcd and kube-apiserver (the test harness, with the inflight
// limits an operator sets for thousands of nodes), builds nodestatussim and
// kwok (hack/build-kwok.sh, cached by version), serves an always-ready CRI
// on a unix socket, and for each node count runs, one after the other:
//
//   - microlet: the nodestatussim binary with --nodes N (nodestatusd's code
//     keeping N nodes);
//   - kwok: kwok with its own node stages (status heartbeat set to the
//     kubelet's 5 min report frequency, 40 s leases renewed every 10 s)
//     managing N Nodes the bench creates for it.
//
// Each agent first warms up until every node is registered, Ready and has
// a Lease; then, over a window, the bench measures the API writes per second
// by resource and verb (apiserver_request_total), the agent process's CPU
// seconds (/proc/<pid>/stat) and its RSS (sampled every 2 s). It prints one
// table with both agents and the targets: writes/s within 5 % of the
// kubelet's N/10 + N/300, microlet's CPU no more than kwok's, its memory per
// node at most 1.5x kwok's.
//
//	flock /tmp/microlet-bench.lock go run ./services/nodestatusd/cmd/nodestatusbench -nodes 100,1000,5000 -duration 5m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

// apiServerArgs are what an operator gives a kube-apiserver that serves
// thousands of nodes (the defaults, 400/200, are sized for small clusters).
// Profiling is on so /debug/pprof can be read while measuring.
var apiServerArgs = []string{
	"--max-requests-inflight=3000",
	"--max-mutating-requests-inflight=1000",
	"--profiling=true",
}

// etcdArgs raise the backend quota from 2 GiB to 8 GiB, etcd's documented
// maximum for large clusters: 5000 leases renewed every 10 s write fast.
var etcdArgs = []string{"--quota-backend-bytes=8589934592"}

type options struct {
	counts     []int
	agents     []string
	duration   time.Duration
	settle     time.Duration
	warmup     time.Duration
	kwokBin    string
	profileDir string
}

func main() {
	nodesFlag := flag.String("nodes", "100,1000", "comma-separated node counts")
	agentsFlag := flag.String("agents", "microlet,kwok", "agents to run per node count, in order: microlet, kwok")
	var o options
	flag.DurationVar(&o.duration, "duration", 5*time.Minute, "measurement window per agent and node count")
	flag.DurationVar(&o.settle, "settle", 15*time.Second, "wait after all nodes are Ready before measuring")
	flag.DurationVar(&o.warmup, "warmup", 0, "longest wait for registration and Ready (0: 5 min + 100 ms per node)")
	flag.StringVar(&o.kwokBin, "kwok", "", "kwok binary (default: built by hack/build-kwok.sh)")
	flag.StringVar(&o.profileDir, "profile-dir", "", "if set, save 30 s CPU profiles of kube-apiserver and nodestatussim taken in each window here")
	flag.Parse()
	var err error
	if o.counts, err = parseCounts(*nodesFlag); err == nil {
		o.agents, err = parseAgents(*agentsFlag)
	}
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = run(ctx, o)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodestatusbench:", err)
		os.Exit(1)
	}
}

func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-nodes: %q is not a positive count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseAgents(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); f {
		case agentMicrolet, agentKwok:
			out = append(out, f)
		default:
			return nil, fmt.Errorf("-agents: %q is neither %s nor %s", f, agentMicrolet, agentKwok)
		}
	}
	return out, nil
}

func run(ctx context.Context, o options) (err error) {
	dir, err := os.MkdirTemp("/tmp", "nsb")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			logf("logs kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	}()
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}

	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	env := &benchEnv{dir: dir, opts: o}
	env.nodestatussim = filepath.Join(dir, "nodestatussim")
	logf("building nodestatussim...")
	if err := runTool(exec.CommandContext(ctx, "go", "build", "-o", env.nodestatussim, "github.com/microlet/microlet/services/nodestatusd/cmd/nodestatussim")); err != nil {
		return fmt.Errorf("build nodestatussim: %w", err)
	}
	if contains(o.agents, agentKwok) {
		if env.kwok = o.kwokBin; env.kwok == "" {
			logf("building kwok (hack/build-kwok.sh, cached)...")
			out, err := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-kwok.sh"), kwokVersion).Output()
			if err != nil {
				return fmt.Errorf("hack/build-kwok.sh: %w", err)
			}
			env.kwok = strings.TrimSpace(string(out))
		}
		if env.kwokConfig, err = writeKwokConfig(ctx, dir); err != nil {
			return err
		}
	}
	env.criSock = filepath.Join(dir, "cri.sock")
	stopCRI, err := serveReadyCRI(env.criSock)
	if err != nil {
		return err
	}
	defer stopCRI()

	logf("starting control plane (kube-apiserver %s; etcd %s)...", strings.Join(apiServerArgs, " "), strings.Join(etcdArgs, " "))
	cp, err := controlplane.Start(ctx, controlplane.Options{ExtraAPIServerArgs: apiServerArgs, ExtraEtcdArgs: etcdArgs})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	env.kubeconfig = cp.AdminKubeconfig()
	env.apiPID = cp.APIServerPID()
	rc := rest.CopyConfig(cp.AdminConfig())
	// The bench's own client must never be the bottleneck.
	rc.QPS, rc.Burst = -1, 0
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if env.admin, err = kubernetes.NewForConfig(rc); err != nil {
		return err
	}

	var results []result
	for _, n := range o.counts {
		for _, a := range o.agents {
			r, err := env.measure(ctx, a, n)
			if err != nil {
				if ctx.Err() != nil {
					return errors.Join(ctx.Err(), err)
				}
				return fmt.Errorf("%s with %d nodes: %w", a, n, err)
			}
			results = append(results, r)
			// Print as we go: a later, bigger count may not finish on a busy machine.
			printTable(os.Stdout, results)
		}
	}
	return nil
}

// benchEnv is what every measurement shares.
type benchEnv struct {
	dir           string
	opts          options
	nodestatussim string
	kwok          string
	kwokConfig    string
	criSock       string
	kubeconfig    string
	apiPID        int
	admin         kubernetes.Interface
	runs          int
}

func runTool(cmd *exec.Cmd) error {
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
