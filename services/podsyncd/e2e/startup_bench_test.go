package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/procinfo"
)

// BenchmarkPodStartup has one sub-benchmark per batch size (10, 30 and
// 110 pods): each of its b.N iterations creates that many pods at once
// through the API (image already present), waits for all to run, and
// deletes them. It reports through b.ReportMetric the p50/p99 latency over
// all iterations' pods from create to all containers running in the
// runtime (runtime-p50-s, runtime-p99-s) and to Running visible in the API
// (api-p50-s, api-p99-s), and per batch podsyncd's and the whole stack's
// CPU seconds and RSS after it. Run with
//
//	go test -run '^$' -bench PodStartup -benchtime 1x -timeout 60m ./services/podsyncd/e2e/
//
// MICROLET_BENCH_PODS=10,30 picks other batch sizes.
func BenchmarkPodStartup(b *testing.B) {
	sizes := []int{10, 30, 110}
	if env := os.Getenv("MICROLET_BENCH_PODS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("MICROLET_BENCH_PODS=%q: want comma-separated positive counts", env)
			}
			sizes = append(sizes, n)
		}
	}
	s := startStack(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			var rtLat, apiLat []time.Duration
			var podsyncdCPU, stackCPU, podsyncdRSS, stackRSS float64
			for i := 0; i < b.N; i++ {
				r := s.startupBatch(b, n, i)
				rtLat, apiLat = append(rtLat, r.runtime...), append(apiLat, r.api...)
				podsyncdCPU += r.podsyncdCPU
				stackCPU += r.stackCPU
				podsyncdRSS, stackRSS = r.podsyncdRSS, r.stackRSS
			}
			b.ReportMetric(pct(rtLat, 50).Seconds(), "runtime-p50-s")
			b.ReportMetric(pct(rtLat, 99).Seconds(), "runtime-p99-s")
			b.ReportMetric(pct(apiLat, 50).Seconds(), "api-p50-s")
			b.ReportMetric(pct(apiLat, 99).Seconds(), "api-p99-s")
			b.ReportMetric(podsyncdCPU/float64(b.N), "podsyncd-cpu-s/batch")
			b.ReportMetric(stackCPU/float64(b.N), "stack-cpu-s/batch")
			b.ReportMetric(podsyncdRSS, "podsyncd-rss-MiB")
			b.ReportMetric(stackRSS, "stack-rss-MiB")
		})
	}
}

// batchResult is what one batch of startupBatch measured.
type batchResult struct {
	// runtime and api are each pod's latency from create to its
	// containers running in the runtime, and to Running in the API.
	runtime, api []time.Duration
	// podsyncdCPU and stackCPU are CPU seconds spent during the batch;
	// podsyncdRSS and stackRSS the resident MiB once all pods ran.
	podsyncdCPU, stackCPU, podsyncdRSS, stackRSS float64
}

// startupBatch creates n pods at once (names unique to iteration iter),
// waits until all run, measures, and deletes them again with the timer
// stopped.
func (s *stack) startupBatch(b *testing.B, n, iter int) batchResult {
	ctx := context.Background()
	ns := "default"
	cc, err := grpcclient.Dial(components.Endpoint(s.runDir, components.RuntimeShim))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	rt := runtimeapi.NewRuntimeServiceClient(cc)

	pids := s.servicePIDs()
	cpu0 := cpuSeconds(pids)
	type times struct{ created, runtime, api time.Time }
	var mu sync.Mutex
	seen := map[types.UID]*times{}
	names := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		names[i] = fmt.Sprintf("bench-%d-%d-%d", n, iter, i)
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			p := s.Pod(name, corev1.RestartPolicyAlways, "trap 'exit 0' TERM; while true; do sleep 1; done")
			start := time.Now()
			created, err := s.admin.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			mu.Lock()
			seen[created.UID] = &times{created: start}
			mu.Unlock()
		}(names[i])
	}
	wg.Wait()
	deadline := time.Now().Add(15 * time.Minute)
	for {
		now := time.Now()
		resp, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}}})
		if err == nil {
			mu.Lock()
			for _, c := range resp.Containers {
				if t := seen[types.UID(c.Labels["io.kubernetes.pod.uid"])]; t != nil && t.runtime.IsZero() {
					t.runtime = now
				}
			}
			mu.Unlock()
		}
		list, err := s.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			mu.Lock()
			for _, p := range list.Items {
				if t := seen[p.UID]; t != nil && t.api.IsZero() && p.Status.Phase == corev1.PodRunning {
					t.api = now
				}
			}
			mu.Unlock()
		}
		done := 0
		mu.Lock()
		for _, t := range seen {
			if !t.runtime.IsZero() && !t.api.IsZero() {
				done++
			}
		}
		mu.Unlock()
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d pods running after 15 min", done, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cpu := cpuSeconds(pids)
	var rtLat, apiLat []time.Duration
	for _, t := range seen {
		rtLat = append(rtLat, t.runtime.Sub(t.created))
		apiLat = append(apiLat, t.api.Sub(t.created))
	}
	res := batchResult{runtime: rtLat, api: apiLat,
		podsyncdCPU: cpu[components.PodSyncd] - cpu0[components.PodSyncd], stackCPU: cpu["total"] - cpu0["total"],
		podsyncdRSS: rssMiB(pids[components.PodSyncd]), stackRSS: totalRSS(pids)}
	// Clean up before the next batch so the node's pod limit holds.
	b.StopTimer()
	defer b.StartTimer()
	for _, name := range names {
		_ = s.admin.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	}
	for _, name := range names {
		s.WaitGone(ns, name)
	}
	return res
}

// pct is the p-th percentile of d (sorting d), zero for none.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := (len(d)*p + 99) / 100
	if i > 0 {
		i--
	}
	return d[i]
}

// servicePIDs maps each service (and "microlet") to its pid.
func (s *stack) servicePIDs() map[string]int {
	out := map[string]int{"microlet": s.PID()}
	for _, c := range components.All {
		out[c.Name] = s.servicePID(c.Name)
	}
	return out
}

// cpuSeconds is each pid's CPU time in seconds, plus their total.
func cpuSeconds(pids map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range pids {
		if u, err := procinfo.Of(pid); err == nil {
			out[name] = u.CPUSeconds
			out["total"] += u.CPUSeconds
		}
	}
	return out
}

// rssMiB is pid's resident set in MiB (0 when it is gone).
func rssMiB(pid int) float64 {
	u, err := procinfo.Of(pid)
	if err != nil {
		return 0
	}
	return float64(u.RSS) / (1 << 20)
}

func totalRSS(pids map[string]int) float64 {
	var sum float64
	for _, pid := range pids {
		sum += rssMiB(pid)
	}
	return sum
}
