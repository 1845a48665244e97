package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	crilogs "k8s.io/cri-client/pkg/logs"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
)

// The benchmarks below measure nodeapi on a whole microlet node (real
// runtime-shim and Docker, the test control plane's kube-apiserver) against
// the same work done without it: reading the CRI log file in this process,
// and calling the CRI streaming server straight from the runtime's Exec
// answer. Every path is also measured through the API server, with
// client-go and with the kubectl binary, as a user would. Each benchmark
// starts its own node. Nothing here asserts a time; the numbers are
// reported (b.ReportMetric), with the 1-minute load average of the machine
// as "load1" because the node, Docker and the control plane share it.
//
//	MICROLET_REQUIRE_CONTROLPLANE=1 go test -run '^$' -bench 'Logs|Memory' -benchtime 3x -timeout 60m ./services/nodeapi/e2e/
//	MICROLET_REQUIRE_CONTROLPLANE=1 go test -run '^$' -bench Exec -benchtime 30x -timeout 60m ./services/nodeapi/e2e/
//
// (-bench . -benchtime 3x runs everything, with few exec samples.)
// Ratios ("x-ReadLogs", "x-direct", "x-cri") divide a path's ns/op (or
// latency) by the direct path's, measured just before in the same run.

const (
	// The big-log container writes bigLogChunks chunks of bigLogChunkLines
	// 80-byte lines (79 characters and a newline), 100 MiB in all, then
	// doneMarker on a line of its own. It pauses bigLogPause after each
	// chunk: runtime-shim copies Docker's json-file log into the CRI file
	// with `docker logs -f`, which loses lines across Docker's own
	// rotation (the daemon's log-opts, 10m x 3 here) when the writer is
	// faster than the copy, and repeats some even when it is not.
	// BenchmarkLogs reads whatever the CRI log holds and prints how far it
	// is from what the container wrote.
	bigLogChunks     = 80
	bigLogChunkLines = 16384
	bigLogPause      = 250 * time.Millisecond
	bigLogLine       = "bench-log 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123"
	bigLogBytes      = bigLogChunks * bigLogChunkLines * (len(bigLogLine) + 1)
	doneMarker       = "BENCH-DONE"

	// The follow writer aims at 10k lines/s: bursts of followBurst 80-byte
	// lines cut from one endless `yes` every followPause. A busybox shell
	// has no finer clock, and the `head` it starts per burst costs time
	// too, so the rate it reaches is measured and reported
	// ("produced-lines/s").
	followBurst = 250
	followPause = 25 * time.Millisecond
	followLine  = "bench-follow 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ 0"
	// followOp is one op of BenchmarkLogsFollow: this many lines received
	// (about a second at 10k lines/s).
	followOp = 10000

	// memoryStreams follow requests are held open in BenchmarkMemory.
	memoryStreams = 20
	// memoryHold is how long each state is held before it is sampled.
	memoryHold = 5 * time.Second
)

var followScript = fmt.Sprintf(`yes '%s' | while :; do head -n %d; usleep %d; done`,
	followLine, followBurst, followPause.Microseconds())

// benchEnv is a node with clients for every path to it.
type benchEnv struct {
	*node.Node
	kubectl string
	// base is nodeapi's URL; nodeapi its HTTPS client with the admin
	// certificate, and nodeapiCfg the same credential for client-go's
	// stream executors.
	base       string
	nodeapi    *http.Client
	nodeapiCfg *rest.Config
	// rt is the node's CRI runtime (runtime-shim's socket).
	rt criapi.RuntimeService
}

func startBench(b *testing.B) *benchEnv {
	b.Helper()
	kubectl := controlplane.Kubectl(b)
	n := node.Start(b, node.Options{})
	e := &benchEnv{Node: n, kubectl: kubectl}
	e.base = "https://127.0.0.1:" + strconv.Itoa(nodeAPIPort(b, n))
	admin := n.CP.AdminConfig()
	pair, err := tls.X509KeyPair(admin.CertData, admin.KeyData)
	if err != nil {
		b.Fatal(err)
	}
	e.nodeapi = &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}, //nolint:gosec // nodeapi's certificate is self-signed, as a kubelet's
		MaxIdleConnsPerHost: 2 * memoryStreams,
	}}
	e.nodeapiCfg = &rest.Config{Host: e.base, TLSClientConfig: rest.TLSClientConfig{Insecure: true, CertData: admin.CertData, KeyData: admin.KeyData}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.rt, err = remote.NewRemoteRuntimeService(ctx, components.Endpoint(n.RunDir, components.RuntimeShim), 2*time.Minute, nil, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.rt.Close(context.Background()) })
	return e
}

// nodeAPIPort asks nodeapi's socket which port it serves.
func nodeAPIPort(b *testing.B, n *node.Node) int {
	b.Helper()
	cc, err := grpcclient.Dial(components.Endpoint(n.RunDir, components.NodeAPI))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := nodeapiv1.NewNodeAPIServiceClient(cc).GetServingInfo(ctx, &nodeapiv1.GetServingInfoRequest{})
	if err != nil {
		b.Fatal(err)
	}
	return int(info.GetPort())
}

// runPod creates a running busybox pod with script in container "main" and
// returns its name, container ID and CRI log path.
func (e *benchEnv) runPod(b *testing.B, name, script string) (id, logPath string) {
	b.Helper()
	p := e.Create(e.Pod(name, corev1.RestartPolicyAlways, script))
	e.WaitPod(p.Namespace, p.Name, "running", running)
	ctx := context.Background()
	cs, err := e.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{
			"io.kubernetes.pod.namespace": p.Namespace, "io.kubernetes.pod.name": p.Name, "io.kubernetes.container.name": "main",
		},
	})
	if err != nil || len(cs) != 1 {
		b.Fatalf("running container of %s: %d found, %v", name, len(cs), err)
	}
	st, err := e.rt.ContainerStatus(ctx, cs[0].Id, false)
	if err != nil {
		b.Fatal(err)
	}
	return cs[0].Id, st.GetStatus().GetLogPath()
}

// pid returns the PID of a service of the node, from `microlet status`.
func (e *benchEnv) pid(b *testing.B, service string) int {
	b.Helper()
	out, err := exec.Command(filepath.Join(e.Bins, "microlet"), "status", "-o", "json", "--run-dir", e.RunDir).Output()
	if err != nil {
		b.Fatalf("microlet status: %v", err)
	}
	var rep struct {
		Components []struct {
			Name string `json:"name"`
			PID  int    `json:"pid"`
		} `json:"components"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		b.Fatalf("microlet status: %v\n%s", err, out)
	}
	for _, c := range rep.Components {
		if c.Name == service && c.PID > 0 {
			return c.PID
		}
	}
	b.Fatalf("microlet status: no pid for %s:\n%s", service, out)
	return 0
}

// cpuMeter reads the CPU time of the node's nodeapi and runtime-shim.
type cpuMeter struct {
	nodeapi, shim int
	t0            time.Time
	api0, shim0   float64
}

func (e *benchEnv) cpuMeter(b *testing.B) *cpuMeter {
	b.Helper()
	return &cpuMeter{nodeapi: e.pid(b, components.NodeAPI), shim: e.pid(b, components.RuntimeShim)}
}

func (m *cpuMeter) start() { m.t0, m.api0, m.shim0 = time.Now(), procCPU(m.nodeapi), procCPU(m.shim) }

// stop returns the CPU seconds each process used since start, and the
// wall time.
func (m *cpuMeter) stop() (api, shim float64, wall time.Duration) {
	return procCPU(m.nodeapi) - m.api0, procCPU(m.shim) - m.shim0, time.Since(m.t0)
}

// procCPU is utime+stime of pid in seconds.
func procCPU(pid int) float64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// procMiB reads a "Vm...:  N kB" field of /proc/<pid>/status in MiB.
func procMiB(pid int, field string) float64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			return kb / 1024
		}
	}
	return 0
}

// load1 is the machine's 1-minute load average.
func load1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return v
}

// get starts a GET to nodeapi with the admin certificate.
func (e *benchEnv) get(ctx context.Context, b *testing.B, path string) *http.Response {
	b.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.base+path, nil)
	if err != nil {
		b.Fatal(err)
	}
	resp, err := e.nodeapi.Do(req)
	if err != nil {
		b.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		b.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return resp
}

// countingDiscard counts what it throws away.
type countingDiscard struct{ n atomic.Int64 }

func (c *countingDiscard) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// BenchmarkLogs reads the whole log of a container that wrote 100 MiB of
// 80-byte lines, every op the whole log: the CRI log file read plainly
// (file-read, a floor: no parsing) and through the CRI log parser the
// kubelet and nodeapi use (ReadLogs, crilogs.ReadLogs into io.Discard), then
// GET /containerLogs straight to nodeapi over HTTPS with the admin
// certificate (nodeapi), through the API server with client-go (apiserver)
// and with `kubectl logs` (kubectl). MB/s counts the log content the user
// gets, about 100 MiB (the CRI file is about half as large again); every
// path must deliver exactly what ReadLogs finds; x-ReadLogs is ns/op over
// ReadLogs' ns/op; nodeapi-cpu-s/op is nodeapi's CPU time per read.
func BenchmarkLogs(b *testing.B) {
	e := startBench(b)
	start := time.Now()
	id, path := e.runPod(b, "bench-log", fmt.Sprintf(`i=0; while [ $i -lt %d ]; do yes '%s' | head -n %d; usleep %d; i=$((i+1)); done; echo %s; exec sleep 3600`,
		bigLogChunks, bigLogLine, bigLogChunkLines, bigLogPause.Microseconds(), doneMarker))
	waitLogTail(b, path, " "+doneMarker+"\n", 10*time.Minute)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// Every path must deliver the log's whole content: what ReadLogs finds
	// in the file (this first read also brings the file into the page
	// cache for every path alike).
	var content countingDiscard
	if err := crilogs.ReadLogs(ctx, path, id, &crilogs.LogOptions{}, e.rt, &content, &content); err != nil {
		b.Fatal(err)
	}
	want := content.n.Load()
	// Printed, not logged: a parent benchmark's log is not shown.
	fmt.Printf("BenchmarkLogs: the container wrote %d bytes; %d reached the CRI log (%.1f MiB with its CRI prefixes) in %s, pod start included\n",
		bigLogBytes+len(doneMarker)+1, want, float64(fi.Size())/(1<<20), time.Since(start).Round(time.Second))
	if diff := want - int64(bigLogBytes+len(doneMarker)+1); diff != 0 {
		fmt.Printf("BenchmarkLogs: WARNING: the CRI log holds %+d bytes (%+.1f%%) against what the container wrote: lines lost or repeated by `docker logs -f` across Docker's json-file rotation, which runtime-shim copies\n",
			diff, 100*float64(diff)/float64(bigLogBytes))
	}
	logsPath := "/containerLogs/default/bench-log/main"
	meter := e.cpuMeter(b)

	var readLogsNs float64
	for _, bc := range []struct {
		name    string
		nodeapi bool // the path goes through nodeapi
		read    func(b *testing.B, w io.Writer)
	}{
		{name: "file-read", read: func(b *testing.B, w io.Writer) {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if _, err := io.Copy(io.Discard, f); err != nil {
				b.Fatal(err)
			}
			w.(*countingDiscard).n.Add(want) // the whole file holds the whole content
		}},
		{name: "ReadLogs", read: func(b *testing.B, w io.Writer) {
			if err := crilogs.ReadLogs(ctx, path, id, &crilogs.LogOptions{}, e.rt, w, w); err != nil {
				b.Fatal(err)
			}
		}},
		{name: "nodeapi", nodeapi: true, read: func(b *testing.B, w io.Writer) {
			resp := e.get(ctx, b, logsPath)
			defer resp.Body.Close()
			if _, err := io.Copy(w, resp.Body); err != nil {
				b.Fatal(err)
			}
		}},
		{name: "apiserver", nodeapi: true, read: func(b *testing.B, w io.Writer) {
			rc, err := e.Admin.CoreV1().Pods("default").GetLogs("bench-log", &corev1.PodLogOptions{Container: "main"}).Stream(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer rc.Close()
			if _, err := io.Copy(w, rc); err != nil {
				b.Fatal(err)
			}
		}},
		{name: "kubectl", nodeapi: true, read: func(b *testing.B, w io.Writer) {
			cmd := e.CP.KubectlCommand(ctx, e.kubectl, "logs", "bench-log")
			var errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = w, &errb
			if err := cmd.Run(); err != nil {
				b.Fatalf("kubectl logs: %v\n%s", err, errb.String())
			}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(want)
			meter.start()
			for b.Loop() {
				var c countingDiscard
				bc.read(b, &c)
				if got := c.n.Load(); got != want {
					b.Fatalf("read %d bytes of log, want %d", got, want)
				}
			}
			api, _, _ := meter.stop()
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if bc.name == "ReadLogs" {
				readLogsNs = ns
			}
			if readLogsNs > 0 {
				b.ReportMetric(ns/readLogsNs, "x-ReadLogs")
			}
			if bc.nodeapi {
				b.ReportMetric(api/float64(b.N), "nodeapi-cpu-s/op")
				b.ReportMetric(procMiB(meter.nodeapi, "VmHWM"), "nodeapi-peak-RSS-MiB")
			}
			b.ReportMetric(load1(), "load1")
		})
	}
}

// waitLogTail waits until the file at path ends with suffix.
func waitLogTail(b *testing.B, path, suffix string, limit time.Duration) {
	b.Helper()
	testenv.EventuallyEvery(b, fmt.Sprintf("%s ending with %q", path, suffix), limit, time.Second, func() error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		buf := make([]byte, len(suffix))
		if fi.Size() >= int64(len(suffix)) {
			if _, err := f.ReadAt(buf, fi.Size()-int64(len(suffix))); err != nil {
				return err
			}
		}
		if string(buf) != suffix {
			return fmt.Errorf("%d bytes, ending %q", fi.Size(), buf)
		}
		return nil
	})
}

// lineStream reads timestamped log lines ("<RFC 3339> <text>\n") and
// records, for each, the time from its CRI timestamp (when Docker took
// the line from the container) to its arrival here.
type lineStream struct {
	r   *bufio.Reader
	lat []time.Duration
}

func newLineStream(r io.Reader) *lineStream { return &lineStream{r: bufio.NewReaderSize(r, 64<<10)} }

func (s *lineStream) read(b *testing.B, n int) {
	b.Helper()
	for i := 0; i < n; i++ {
		line, err := s.r.ReadSlice('\n')
		if err != nil {
			b.Fatalf("after %d lines: %v", i, err)
		}
		now := time.Now()
		stamp, text, ok := bytes.Cut(line, []byte(" "))
		ts, err := time.Parse(time.RFC3339Nano, string(stamp))
		if !ok || err != nil || !bytes.HasPrefix(text, []byte("bench-follow ")) {
			b.Fatalf("line %q: want a timestamp and the follow writer's line (%v)", line, err)
		}
		s.lat = append(s.lat, now.Sub(ts))
	}
}

// percentile returns the p-th percentile of d in milliseconds.
func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p/100+0.5) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i]) / float64(time.Millisecond)
}

// countLines counts the newlines of path between two offsets.
func countLines(b *testing.B, path string, from, to int64) int {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, from, to-from))
	if err != nil {
		b.Fatal(err)
	}
	return bytes.Count(data, []byte("\n"))
}

func fileSize(b *testing.B, path string) int64 {
	b.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// BenchmarkLogsFollow follows a container writing bursts of 80-byte lines
// at up to 10k lines/s, from the end of its log with timestamps (tail 0),
// and times each line from its CRI timestamp to its arrival: read in this
// process with crilogs.ReadLogs in follow mode (direct), from nodeapi over
// HTTPS (nodeapi), through the API server with client-go (apiserver) and
// with `kubectl logs -f` (kubectl). One op is followOp lines received;
// lines/s is what arrived, produced-lines/s what the container wrote to
// the CRI log in the same window; p50-ms/p99-ms the line latency, and
// x-direct the p50 over the direct reader's; nodeapi-cpu-% and shim-cpu-%
// the two services' CPU use while following (100 = one core);
// ContainerStatus/line the CRI calls the log reader made per line.
func BenchmarkLogsFollow(b *testing.B) {
	e := startBench(b)
	id, path := e.runPod(b, "bench-follow", followScript)
	meter := e.cpuMeter(b)
	query := "?follow=true&timestamps=true&tailLines=0"
	tail0 := int64(0)
	apiOpts := &corev1.PodLogOptions{Container: "main", Follow: true, Timestamps: true, TailLines: &tail0}

	// The direct reader counts the CRI ContainerStatus calls ReadLogs makes
	// (one each time it has caught up with the file); nodeapi runs the same
	// code.
	directRT := &statusCounter{RuntimeService: e.rt}
	var directP50 float64
	for _, bc := range []struct {
		name string
		// open starts the stream; it ends with ctx.
		open func(ctx context.Context, b *testing.B) io.Reader
	}{
		{name: "direct", open: func(ctx context.Context, b *testing.B) io.Reader {
			pr, pw := io.Pipe()
			go func() {
				opts := &crilogs.LogOptions{Follow: true, Timestamp: true, TailLines: &tail0}
				pw.CloseWithError(crilogs.ReadLogs(ctx, path, id, opts, directRT, pw, pw))
			}()
			context.AfterFunc(ctx, func() { _ = pr.Close() })
			return pr
		}},
		{name: "nodeapi", open: func(ctx context.Context, b *testing.B) io.Reader {
			resp := e.get(ctx, b, "/containerLogs/default/bench-follow/main"+query)
			context.AfterFunc(ctx, func() { _ = resp.Body.Close() })
			return resp.Body
		}},
		{name: "apiserver", open: func(ctx context.Context, b *testing.B) io.Reader {
			rc, err := e.Admin.CoreV1().Pods("default").GetLogs("bench-follow", apiOpts).Stream(ctx)
			if err != nil {
				b.Fatal(err)
			}
			context.AfterFunc(ctx, func() { _ = rc.Close() })
			return rc
		}},
		{name: "kubectl", open: func(ctx context.Context, b *testing.B) io.Reader {
			cmd := e.CP.KubectlCommand(ctx, e.kubectl, "logs", "-f", "--timestamps", "--tail=0", "bench-follow")
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = cmd.Wait() })
			return out
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := newLineStream(bc.open(ctx, b))
			s.read(b, 2*followBurst) // flowing; not timed
			s.lat = s.lat[:0]
			size0 := fileSize(b, path)
			meter.start()
			directRT.calls.Store(0)
			for b.Loop() {
				s.read(b, followOp)
			}
			api, shim, wall := meter.stop()
			if bc.name == "direct" {
				b.ReportMetric(float64(directRT.calls.Load())/float64(b.N*followOp), "ContainerStatus/line")
			}
			produced := countLines(b, path, size0, fileSize(b, path))
			b.ReportMetric(float64(b.N*followOp)/wall.Seconds(), "lines/s")
			b.ReportMetric(float64(produced)/wall.Seconds(), "produced-lines/s")
			p50 := percentile(s.lat, 50)
			b.ReportMetric(p50, "p50-ms")
			b.ReportMetric(percentile(s.lat, 99), "p99-ms")
			if bc.name == "direct" {
				directP50 = p50
			}
			if directP50 > 0 {
				b.ReportMetric(p50/directP50, "x-direct")
			}
			b.ReportMetric(100*api/wall.Seconds(), "nodeapi-cpu-%")
			b.ReportMetric(100*shim/wall.Seconds(), "shim-cpu-%")
			b.ReportMetric(load1(), "load1")
		})
	}
}

// statusCounter counts ContainerStatus calls.
type statusCounter struct {
	criapi.RuntimeService
	calls atomic.Int64
}

func (c *statusCounter) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	c.calls.Add(1)
	return c.RuntimeService.ContainerStatus(ctx, id, verbose)
}

// BenchmarkExec runs `echo x` in a running container, one session per op,
// and checks its output: the CRI's Exec answer followed straight to the
// runtime's streaming server with client-go's SPDY executor (cri), the
// kubelet API's /exec on nodeapi over SPDY and WebSocket with the admin
// certificate, the pods/exec subresource through the API server with
// client-go over SPDY and WebSocket, and `kubectl exec` (a process per op,
// as a user runs it). x-cri is ns/op over the cri path's.
func BenchmarkExec(b *testing.B) {
	e := startBench(b)
	id, _ := e.runPod(b, "bench-exec", "exec sleep 3600")
	ctx := context.Background()
	command := []string{"echo", "x"}
	q := url.Values{"command": command, "output": {"1"}, "error": {"1"}}
	nodeapiURL, err := url.Parse(e.base + "/exec/default/bench-exec/main?" + q.Encode())
	if err != nil {
		b.Fatal(err)
	}
	apiURL := e.Admin.CoreV1().RESTClient().Post().Namespace("default").Resource("pods").Name("bench-exec").SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	adminCfg := e.CP.AdminConfig()
	spdy := func(cfg *rest.Config, u *url.URL) func(b *testing.B, stdout, stderr io.Writer) {
		return func(b *testing.B, stdout, stderr io.Writer) {
			ex, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
			if err != nil {
				b.Fatal(err)
			}
			if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}); err != nil {
				b.Fatal(err)
			}
		}
	}
	websocket := func(cfg *rest.Config, u *url.URL) func(b *testing.B, stdout, stderr io.Writer) {
		return func(b *testing.B, stdout, stderr io.Writer) {
			ex, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
			if err != nil {
				b.Fatal(err)
			}
			if err := ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr}); err != nil {
				b.Fatal(err)
			}
		}
	}

	var criNs float64
	for _, bc := range []struct {
		name string
		exec func(b *testing.B, stdout, stderr io.Writer)
	}{
		{name: "cri", exec: func(b *testing.B, stdout, stderr io.Writer) {
			resp, err := e.rt.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: command, Stdout: true, Stderr: true})
			if err != nil {
				b.Fatal(err)
			}
			u, err := url.Parse(resp.GetUrl())
			if err != nil {
				b.Fatal(err)
			}
			spdy(&rest.Config{}, u)(b, stdout, stderr)
		}},
		{name: "nodeapi-spdy", exec: spdy(e.nodeapiCfg, nodeapiURL)},
		{name: "nodeapi-websocket", exec: websocket(e.nodeapiCfg, nodeapiURL)},
		{name: "apiserver-spdy", exec: spdy(adminCfg, apiURL)},
		{name: "apiserver-websocket", exec: websocket(adminCfg, apiURL)},
		{name: "kubectl", exec: func(b *testing.B, stdout, stderr io.Writer) {
			cmd := e.CP.KubectlCommand(ctx, e.kubectl, append([]string{"exec", "bench-exec", "--"}, command...)...)
			cmd.Stdout, cmd.Stderr = stdout, stderr
			if err := cmd.Run(); err != nil {
				b.Fatalf("kubectl exec: %v: %s", err, stderr)
			}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				var out, errb bytes.Buffer
				bc.exec(b, &out, &errb)
				if out.String() != "x\n" {
					b.Fatalf("stdout %q, stderr %q; want x", out.String(), errb.String())
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if bc.name == "cri" {
				criNs = ns
			}
			if criNs > 0 {
				b.ReportMetric(ns/criNs, "x-cri")
			}
			b.ReportMetric(load1(), "load1")
		})
	}
}

// BenchmarkMemory samples nodeapi's resident memory (VmRSS, and RssAnon:
// without the pages of the binary), Go heap in use and goroutines (from
// its /metrics) and CPU use in four states, each
// held memoryHold per op: idle on a fresh node with two pods (idle), with
// memoryStreams follow requests held open straight to nodeapi on a
// container that logs nothing (follow20-quiet) and on the ~10k lines/s
// writer, every stream read to the end (follow20-busy, lines/s is what all
// streams received together), and idle again after they closed
// (idle-after). Each stream is its own HTTPS connection.
func BenchmarkMemory(b *testing.B) {
	e := startBench(b)
	e.runPod(b, "bench-quiet", "exec sleep 3600")
	_, busyLog := e.runPod(b, "bench-busy", followScript)
	meter := e.cpuMeter(b)
	// The node has settled once both pods run and the busy writer's output
	// flows through Docker and runtime-shim into its CRI log: a second's
	// worth of its lines (followOp) is there.
	testenv.Eventually(b, fmt.Sprintf("%d lines in %s", followOp, busyLog), 2*time.Minute, func() error {
		st, err := os.Stat(busyLog)
		if err != nil {
			return err
		}
		// A CRI line is the line plus timestamp, stream and tag (> 40 bytes).
		if want := int64(followOp * (len(followLine) + 40)); st.Size() < want {
			return fmt.Errorf("%d bytes, want %d", st.Size(), want)
		}
		return nil
	})

	hold := func(b *testing.B, pod string, streams int) {
		b.Helper()
		var rss, anon, heap, goroutines, api, shim float64
		var lines atomic.Int64
		var received int64
		var window time.Duration
		for b.Loop() {
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := 0; i < streams; i++ {
				resp := e.get(ctx, b, "/containerLogs/default/"+pod+"/main?follow=true&tailLines=0")
				wg.Go(func() {
					defer resp.Body.Close()
					r := bufio.NewReaderSize(resp.Body, 64<<10)
					for {
						chunk, err := r.ReadSlice('\n')
						if err != nil && err != bufio.ErrBufferFull {
							return
						}
						lines.Add(int64(bytes.Count(chunk, []byte("\n"))))
					}
				})
			}
			lines.Store(0)
			meter.start()
			time.Sleep(memoryHold) // the measurement window itself: CPU and lines per second over it
			a, s, w := meter.stop()
			received += lines.Load()
			api, shim, window = api+a, shim+s, window+w
			rss += procMiB(meter.nodeapi, "VmRSS")
			anon += procMiB(meter.nodeapi, "RssAnon")
			m := e.goMetrics(b)
			heap += m["go_memstats_heap_inuse_bytes"] / (1 << 20)
			goroutines += m["go_goroutines"]
			cancel()
			wg.Wait()
		}
		n := float64(b.N)
		b.ReportMetric(rss/n, "RSS-MiB")
		b.ReportMetric(anon/n, "anon-RSS-MiB")
		b.ReportMetric(heap/n, "heap-MiB")
		b.ReportMetric(goroutines/n, "goroutines")
		if streams > 0 {
			b.ReportMetric(float64(received)/window.Seconds(), "lines/s")
		}
		b.ReportMetric(100*api/window.Seconds(), "nodeapi-cpu-%")
		b.ReportMetric(100*shim/window.Seconds(), "shim-cpu-%")
		b.ReportMetric(load1(), "load1")
	}
	b.Run("idle", func(b *testing.B) { hold(b, "", 0) })
	b.Run(fmt.Sprintf("follow%d-quiet", memoryStreams), func(b *testing.B) { hold(b, "bench-quiet", memoryStreams) })
	b.Run(fmt.Sprintf("follow%d-busy", memoryStreams), func(b *testing.B) { hold(b, "bench-busy", memoryStreams) })
	b.Run("idle-after", func(b *testing.B) { hold(b, "", 0) })
}

// goMetrics reads nodeapi's /metrics and returns its unlabelled samples.
func (e *benchEnv) goMetrics(b *testing.B) map[string]float64 {
	b.Helper()
	resp := e.get(context.Background(), b, "/metrics")
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out
}
