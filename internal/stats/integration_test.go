package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/rand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	kubelettypes "k8s.io/kubelet/pkg/types"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/shim"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// scrapeResource is one /metrics/resource scrape, parsed.
func scrapeResource(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics/resource")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics/resource: %d", resp.StatusCode)
	}
	return parseMetrics(t, resp.Body)
}

func fetchSummary(t *testing.T, url string, only bool) statsv1alpha1.Summary {
	t.Helper()
	q := ""
	if only {
		q = "?only_cpu_and_memory=true"
	}
	resp, err := http.Get(url + "/stats/summary" + q)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/stats/summary: %d %s", resp.StatusCode, b)
	}
	var s statsv1alpha1.Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// rate is what metrics-server computes from two scrapes of a cumulative
// CPU counter: the increase over the samples' own timestamps, in cores.
func rate(a, b *dto.Metric) (float64, bool) {
	if a == nil || b == nil || b.GetTimestampMs() <= a.GetTimestampMs() {
		return 0, false
	}
	return (b.GetCounter().GetValue() - a.GetCounter().GetValue()) / (float64(b.GetTimestampMs()-a.GetTimestampMs()) / 1000), true
}

// TestRuntimeShim reads a node running a real pod through the real
// runtime-shim and Docker: first with no pods, then with a pod whose one
// container burns CPU and whose other holds 64 MiB and writes an emptyDir,
// checking the Summary and /metrics/resource the way metrics-server and
// `kubectl top` read them.
func TestRuntimeShim(t *testing.T) {
	env := shim.Start(t, "nodeapi-stats")
	podsDir, logsDir := filepath.Join(env.Dir, "pods"), filepath.Join(env.Dir, "logs")
	p := New(env.Runtime, env.Images, WithNodeName("stats-e2e"), WithRootDir(env.Dir), WithPodsDir(podsDir), WithPodLogsDir(logsDir),
		WithVolumeStatsPeriod(0), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	mux := http.NewServeMux()
	mux.Handle("/stats/summary", SummaryHandler(p))
	mux.Handle("/metrics/resource", ResourceMetricsHandler(p))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	maxNanoCores := float64(runtime.NumCPU()) * 1e9 * 1.5

	t.Run("node only", func(t *testing.T) {
		s := fetchSummary(t, srv.URL, false)
		if len(s.Pods) != 0 {
			t.Fatalf("pods %+v on an empty instance", s.Pods)
		}
		n := s.Node
		if n.NodeName != "stats-e2e" || n.StartTime.IsZero() || n.CPU == nil || n.Memory == nil || n.Fs == nil || n.Rlimit == nil ||
			n.Runtime == nil || n.Runtime.ImageFs == nil || n.Runtime.ImageFs.CapacityBytes == nil {
			t.Fatalf("node %+v", n)
		}
		if *n.Memory.WorkingSetBytes == 0 || *n.Memory.WorkingSetBytes > *n.Memory.UsageBytes || *n.Memory.AvailableBytes == 0 {
			t.Errorf("memory %+v", n.Memory)
		}
		if *n.Fs.CapacityBytes == 0 || *n.Rlimit.MaxPID == 0 || *n.Rlimit.NumOfRunningProcesses == 0 {
			t.Errorf("fs %+v rlimit %+v", n.Fs, n.Rlimit)
		}
		testenv.Eventually(t, "node usageNanoCores", time.Minute, func() error {
			n := fetchSummary(t, srv.URL, true).Node
			if n.CPU.UsageNanoCores == nil || *n.CPU.UsageNanoCores == 0 || float64(*n.CPU.UsageNanoCores) > maxNanoCores {
				return fmt.Errorf("node cpu %+v", n.CPU)
			}
			return nil
		})
		mf := scrapeResource(t, srv.URL)
		if m := sample(mf, "resource_scrape_error", nil); m == nil || metricValue(m) != 0 {
			t.Fatalf("scrape error %v", m)
		}
		if sample(mf, "node_cpu_usage_seconds_total", nil) == nil || sample(mf, "node_memory_working_set_bytes", nil) == nil {
			t.Errorf("node metrics missing: %v", mf)
		}
		for _, f := range []string{"container_cpu_usage_seconds_total", "pod_cpu_usage_seconds_total", "container_start_time_seconds"} {
			if _, ok := mf[f]; ok {
				t.Errorf("%s with no pods", f)
			}
		}
	})

	t.Run("pod", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		name, ns, uid := "burner-"+rand.String(6), "stats-e2e", "uid-"+rand.String(16)
		cacheDir := filepath.Join(podsDir, uid, "volumes", pluginEmptyDir, "cache")
		if err := os.MkdirAll(cacheDir, 0o777); err != nil {
			t.Fatal(err)
		}
		pc := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid},
			Hostname:     name,
			LogDirectory: filepath.Join(logsDir, ns+"_"+name+"_"+uid),
			Labels:       map[string]string{kubelettypes.KubernetesPodNameLabel: name, kubelettypes.KubernetesPodNamespaceLabel: ns, kubelettypes.KubernetesPodUIDLabel: uid},
			Linux:        &runtimeapi.LinuxPodSandboxConfig{},
		}
		sb, err := env.Runtime.RunPodSandbox(ctx, pc, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = env.Runtime.StopPodSandbox(ctx, sb)
			_ = env.Runtime.RemovePodSandbox(ctx, sb)
		})
		start := func(cname string, script string, res *runtimeapi.LinuxContainerResources, mounts ...*runtimeapi.Mount) {
			t.Helper()
			cc := &runtimeapi.ContainerConfig{
				Metadata: &runtimeapi.ContainerMetadata{Name: cname},
				Image:    &runtimeapi.ImageSpec{Image: env.Busybox},
				Command:  []string{"sh", "-c", script},
				LogPath:  cname + "/0.log",
				Labels:   map[string]string{kubelettypes.KubernetesPodNameLabel: name, kubelettypes.KubernetesPodNamespaceLabel: ns, kubelettypes.KubernetesPodUIDLabel: uid, kubelettypes.KubernetesContainerNameLabel: cname},
				Mounts:   mounts,
				Linux:    &runtimeapi.LinuxContainerConfig{Resources: res},
			}
			id, err := env.Runtime.CreateContainer(ctx, sb, cc, pc)
			if err != nil {
				t.Fatal(err)
			}
			if err := env.Runtime.StartContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		// A fifth of a core at most, to share the machine politely.
		start("burn", "exec dd if=/dev/zero of=/dev/null bs=64k", &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000})
		// 8 MiB into the emptyDir, then 64 MiB held by dd, blocked writing
		// to a pipe nobody reads.
		start("mem", "echo started; dd if=/dev/zero of=/cache/blob bs=1M count=8 && echo wrote; dd if=/dev/zero bs=64M count=1 | sleep 3600",
			nil, &runtimeapi.Mount{ContainerPath: "/cache", HostPath: cacheDir})

		const held = 64 << 20
		var first statsv1alpha1.Summary
		testenv.Eventually(t, "pod CPU rates and the 64 MiB working set", 2*time.Minute, func() error {
			first = fetchSummary(t, srv.URL, false)
			pod := findPod(&first, ns, name)
			if pod == nil {
				return fmt.Errorf("pod missing: %+v", first.Pods)
			}
			if len(pod.Containers) != 2 {
				return fmt.Errorf("containers %+v", pod.Containers)
			}
			burn, mem := pod.Containers[0], pod.Containers[1]
			switch {
			case burn.CPU.UsageNanoCores == nil || *burn.CPU.UsageNanoCores == 0:
				return fmt.Errorf("burn cpu %+v", burn.CPU)
			case pod.CPU == nil || pod.CPU.UsageNanoCores == nil || *pod.CPU.UsageNanoCores == 0:
				return fmt.Errorf("pod cpu %+v", pod.CPU)
			case first.Node.CPU.UsageNanoCores == nil || *first.Node.CPU.UsageNanoCores == 0:
				return fmt.Errorf("node cpu %+v", first.Node.CPU)
			case mem.Memory.WorkingSetBytes == nil || *mem.Memory.WorkingSetBytes < held:
				return fmt.Errorf("mem working set %v", mem.Memory.WorkingSetBytes)
			case len(pod.VolumeStats) != 1 || *pod.VolumeStats[0].UsedBytes < 8<<20:
				return fmt.Errorf("volumes %+v", pod.VolumeStats)
			}
			return nil
		})

		// Field by field, as metrics-server and `kubectl top` read it.
		pod := findPod(&first, ns, name)
		if pod.PodRef != (statsv1alpha1.PodReference{Name: name, Namespace: ns, UID: uid}) {
			t.Errorf("podRef %+v", pod.PodRef)
		}
		if pod.StartTime.IsZero() || time.Since(pod.StartTime.Time) > 10*time.Minute {
			t.Errorf("pod start %v", pod.StartTime)
		}
		burn, mem := pod.Containers[0], pod.Containers[1]
		if burn.Name != "burn" || mem.Name != "mem" {
			t.Fatalf("container names %q %q", burn.Name, mem.Name)
		}
		for _, c := range pod.Containers {
			if c.StartTime.Before(&pod.StartTime) || *c.CPU.UsageCoreNanoSeconds == 0 || c.Memory.UsageBytes == nil ||
				*c.Memory.WorkingSetBytes > *c.Memory.UsageBytes {
				t.Errorf("container %s: %+v cpu %+v memory %+v", c.Name, c.StartTime, c.CPU, c.Memory)
			}
			if c.Rootfs == nil || c.Rootfs.CapacityBytes == nil || c.Logs == nil {
				t.Errorf("container %s rootfs %+v logs %+v", c.Name, c.Rootfs, c.Logs)
			}
		}
		if v := float64(*burn.CPU.UsageNanoCores); v > maxNanoCores {
			t.Errorf("burn nanocores %v", v)
		}
		if *mem.Logs.UsedBytes == 0 || *mem.Logs.InodesUsed != 1 {
			t.Errorf("mem logs %+v", mem.Logs)
		}
		if *pod.Memory.WorkingSetBytes < held || *pod.CPU.UsageCoreNanoSeconds < *burn.CPU.UsageCoreNanoSeconds {
			t.Errorf("pod memory %+v cpu %+v", pod.Memory, pod.CPU)
		}
		if pod.Network == nil || pod.Network.Name != "eth0" || pod.Network.RxBytes == nil {
			t.Errorf("pod network %+v", pod.Network)
		} else if len(pod.Network.Interfaces) == 0 || pod.Network.Interfaces[0].Name != "eth0" {
			// The kubelet lists the default interface too (e2e_node's
			// Summary API spec wants the list).
			t.Errorf("pod network interfaces %+v, want eth0 listed first", pod.Network.Interfaces)
		}
		if pod.EphemeralStorage == nil || *pod.EphemeralStorage.UsedBytes < 8<<20 {
			t.Errorf("ephemeral storage %+v", pod.EphemeralStorage)
		}
		if *first.Node.Memory.WorkingSetBytes < held {
			t.Errorf("node working set %d below the pod's", *first.Node.Memory.WorkingSetBytes)
		}

		// /metrics/resource: two scrapes give metrics-server's CPU rates.
		cl := map[string]string{"container": "burn", "pod": name, "namespace": ns}
		ml := map[string]string{"container": "mem", "pod": name, "namespace": ns}
		pl := map[string]string{"pod": name, "namespace": ns}
		a := scrapeResource(t, srv.URL)
		testenv.Eventually(t, "CPU rates from two /metrics/resource scrapes", time.Minute, func() error {
			b := scrapeResource(t, srv.URL)
			for _, s := range []struct {
				name   string
				labels map[string]string
			}{{"container_cpu_usage_seconds_total", cl}, {"pod_cpu_usage_seconds_total", pl}, {"node_cpu_usage_seconds_total", nil}} {
				r, ok := rate(sample(a, s.name, s.labels), sample(b, s.name, s.labels))
				if !ok || r <= 0 || r*1e9 > maxNanoCores {
					return fmt.Errorf("%s%v: rate %v (%v)", s.name, s.labels, r, ok)
				}
			}
			if m := sample(b, "container_memory_working_set_bytes", ml); m == nil || metricValue(m) < held {
				return fmt.Errorf("mem working set %v", m)
			}
			if m := sample(b, "pod_memory_working_set_bytes", pl); m == nil || metricValue(m) < held {
				return fmt.Errorf("pod working set %v", m)
			}
			if m := sample(b, "container_start_time_seconds", cl); m == nil || int64(metricValue(m)) != burn.StartTime.Unix() {
				return fmt.Errorf("burn start time %v, summary %v", m, burn.StartTime)
			}
			if m := sample(b, "resource_scrape_error", nil); m == nil || metricValue(m) != 0 {
				return fmt.Errorf("scrape error %v", m)
			}
			return nil
		})

		// The cost of one scrape against the real runtime, for the docs.
		for _, only := range []bool{true, false} {
			began := time.Now()
			if _, err := p.Summary(ctx, only); err != nil {
				t.Fatal(err)
			}
			t.Logf("one Summary (only_cpu_and_memory=%v) with 1 pod of 2 containers: %v", only, time.Since(began))
		}
	})
}

// testWriter sends log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
