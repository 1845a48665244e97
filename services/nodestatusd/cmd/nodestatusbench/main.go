// Command nodestatusbench measures nodestatusd --simulate against a real
// control plane: it starts etcd and kube-apiserver (the test harness),
// builds nodestatusd, and for each node count runs it with --simulate N,
// waits until every node is registered and Ready, then measures over a
// window the API writes per second by resource and verb (from the
// apiserver's apiserver_request_total), and the agent's CPU seconds and
// RSS, and prints a table beside the kubelet's own pattern (N/10 lease
// renewals plus N/300 status reports per second).
//
//	go run ./services/nodestatusd/cmd/nodestatusbench -nodes 100,1000 -duration 1m
//
// Keep -duration short on a shared machine; 5m gives steadier status-report
// rates (they come once per 5 min per node, jittered).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func main() {
	nodesFlag := flag.String("nodes", "100,1000", "comma-separated node counts")
	duration := flag.Duration("duration", time.Minute, "measurement window per node count")
	settle := flag.Duration("settle", 15*time.Second, "wait after all nodes are Ready before measuring")
	flag.Parse()
	if err := run(*nodesFlag, *duration, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "nodestatusbench:", err)
		os.Exit(1)
	}
}

type result struct {
	nodes            int
	window           time.Duration
	writes           map[string]float64 // "resource/verb" -> count in window
	cpuSeconds       float64
	rssBytes         int64
	registerAndReady time.Duration
	// ready is how many nodes were Ready when measuring began.
	ready int
}

func run(nodesFlag string, duration, settle time.Duration) error {
	var counts []int
	for _, s := range strings.Split(nodesFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-nodes: %q is not a positive count", s)
		}
		counts = append(counts, n)
	}
	dir, err := os.MkdirTemp("/tmp", "nsb")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	bin := filepath.Join(dir, "nodestatusd")
	fmt.Fprintln(os.Stderr, "building nodestatusd...")
	build := exec.Command("go", "build", "-o", bin, "github.com/microlet/microlet/services/nodestatusd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}

	criSock := filepath.Join(dir, "cri.sock")
	stopCRI, err := serveReadyCRI(criSock)
	if err != nil {
		return err
	}
	defer stopCRI()

	ctx := context.Background()
	fmt.Fprintln(os.Stderr, "starting control plane...")
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	admin, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return err
	}

	var results []result
	for i, n := range counts {
		r, err := measure(ctx, admin, cp.AdminKubeconfig(), bin, criSock, dir, fmt.Sprintf("b%d", i), n, duration, settle)
		if err != nil {
			return fmt.Errorf("%d nodes: %w", n, err)
		}
		results = append(results, r)
		// Print as we go: a later, bigger count may not finish on a busy machine.
		printTable(results[len(results)-1:])
	}
	if len(results) > 1 {
		fmt.Println("all:")
		printTable(results)
	}
	return nil
}

func measure(ctx context.Context, admin kubernetes.Interface, kubeconfig, bin, criSock, dir, prefix string, n int, duration, settle time.Duration) (result, error) {
	r := result{nodes: n, window: duration}
	runDir := filepath.Join(dir, prefix)
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return r, err
	}
	logf, err := os.Create(filepath.Join(dir, prefix+".log"))
	if err != nil {
		return r, err
	}
	defer func() { _ = logf.Close() }()
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--run-dir", runDir, "--simulate", strconv.Itoa(n),
		"--simulate-prefix", prefix, "--runtime-endpoint", "unix://"+criSock, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	fmt.Fprintf(os.Stderr, "%d nodes: waiting for registration and Ready...\n", n)
	sel := "simulate.microlet.io/prefix=" + prefix
	deadline := time.Now().Add(5*time.Minute + time.Duration(n)*100*time.Millisecond)
	for {
		list, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: "0"})
		ready := 0
		if err == nil {
			for _, node := range list.Items {
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
						ready++
					}
				}
			}
		}
		r.ready = ready
		if ready == n {
			break
		}
		if time.Now().After(deadline) {
			// Measure anyway: an overloaded apiserver is a result too.
			fmt.Fprintf(os.Stderr, "%d nodes: only %d Ready after %s; measuring anyway (log: %s)\n", n, ready, time.Since(start).Round(time.Second), logf.Name())
			break
		}
		time.Sleep(2 * time.Second)
	}
	r.registerAndReady = time.Since(start)
	time.Sleep(settle)

	before, err := scrape(ctx, admin)
	if err != nil {
		return r, err
	}
	cpu0, err := cpuSeconds(cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	time.Sleep(duration)
	after, err := scrape(ctx, admin)
	if err != nil {
		return r, err
	}
	cpu1, err := cpuSeconds(cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	r.window = time.Since(t0)
	r.cpuSeconds = cpu1 - cpu0
	r.rssBytes, err = rss(cmd.Process.Pid)
	if err != nil {
		return r, err
	}
	r.writes = map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			r.writes[k] = d
		}
	}
	return r, nil
}

// scrape reads apiserver_request_total and sums the write verbs by
// resource[/subresource] and verb.
func scrape(ctx context.Context, admin kubernetes.Interface) (map[string]float64, error) {
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("apiserver /metrics: %w", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	out := map[string]float64{}
	mf, ok := mfs["apiserver_request_total"]
	if !ok {
		return out, nil
	}
	for _, m := range mf.GetMetric() {
		l := labels(m)
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE":
		default:
			continue
		}
		res := l["resource"]
		if l["subresource"] != "" {
			res += "/" + l["subresource"]
		}
		out[res+" "+l["verb"]] += m.GetCounter().GetValue()
	}
	return out, nil
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may contain spaces).
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100, nil // USER_HZ is 100 on Linux
}

func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func printTable(results []result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "nodes\tReady\twindow s\tready s\twrites/s\ttarget/s\tratio\tCPU-s\tCPU-ms/node/s\tRSS MiB\tRSS KiB/node\t")
	for _, r := range results {
		total := 0.0
		for _, v := range r.writes {
			total += v
		}
		secs := r.window.Seconds()
		target := float64(r.nodes)/10 + float64(r.nodes)/300
		fmt.Fprintf(w, "%d\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.3f\t%.2f\t%.3f\t%.1f\t%.1f\t\n", r.nodes, r.ready, secs, r.registerAndReady.Seconds(),
			total/secs, target, total/secs/target, r.cpuSeconds, 1000*r.cpuSeconds/secs/float64(r.nodes),
			float64(r.rssBytes)/(1<<20), float64(r.rssBytes)/1024/float64(r.nodes))
	}
	_ = w.Flush()
	fmt.Println()
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "nodes\tresource verb\twrites/s\t")
	for _, r := range results {
		keys := make([]string, 0, len(r.writes))
		for k := range r.writes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%d\t%s\t%.3f\t\n", r.nodes, k, r.writes[k]/r.window.Seconds())
		}
	}
	_ = w.Flush()
}

// readyCRI is a CRI runtime that is always ready, so simulated nodes are
// Ready and the startup loop ends as it would on a healthy node.
type readyCRI struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
}

func (readyCRI) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "benchcri", RuntimeVersion: "1"}, nil
}

func (readyCRI) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true},
	}}}, nil
}

func (readyCRI) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{}, nil
}

func serveReadyCRI(path string) (func(), error) {
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, readyCRI{})
	runtimeapi.RegisterImageServiceServer(srv, readyCRI{})
	go func() { _ = srv.Serve(lis) }()
	return srv.Stop, nil
}
