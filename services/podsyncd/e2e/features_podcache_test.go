package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/testenv"
)

// TestResyncReadsNoRuntimeState: the periodic resync of a pod whose runtime
// state did not change is served from the pod cache the relister keeps
// current, as the kubelet's pod workers read its PLEG cache: over a
// stretch of many resyncs of Running pods podsyncd's syncs read no pod's
// state from the runtime (its pod cache's misses and its CRI
// PodSandboxStatus calls, from podsyncd's own metrics; runtime-shim's
// count of every client's calls is logged beside them). Before the cache,
// every resync read each pod twice (before and after the sync).
func TestResyncReadsNoRuntimeState(t *testing.T) {
	shimMetrics, podsyncdMetrics := freeLoopbackAddr(t), freeLoopbackAddr(t)
	s := startStackArgs(t, map[string][]string{
		components.RuntimeShim: {"--metrics-addr=" + shimMetrics},
		components.PodSyncd:    {"--metrics-addr=" + podsyncdMetrics, "--resync-period=5s"},
	})
	const pods = 3
	for i := range pods {
		s.Create(s.Pod(fmt.Sprintf("cached-%d", i), corev1.RestartPolicyAlways, "trap 'exit 0' TERM; sleep 2147483647 & wait"))
	}
	for i := range pods {
		s.WaitPod("default", fmt.Sprintf("cached-%d", i), "Ready", ready)
	}
	c0, cri0, own0 := scrapeCounters(t, podsyncdMetrics), criCalls(t, shimMetrics), podStateReads(t, podsyncdMetrics)
	// At least five resyncs of every pod.
	const syncs = 5 * pods
	var c1 counters
	s.Eventually(fmt.Sprintf("%d pod worker passes", syncs), 3*time.Minute, func() (bool, string) {
		c1 = scrapeCounters(t, podsyncdMetrics)
		d := c1.sub(c0)
		return d.syncs >= syncs, fmt.Sprintf("%v pod worker passes", d.syncs)
	})
	cri1, own1 := criCalls(t, shimMetrics), podStateReads(t, podsyncdMetrics)
	passes := c1.sub(c0).syncs
	own := sub(own1, own0)
	t.Logf("%v pod worker passes over %d Running pods: podsyncd's reads %v; runtime-shim's CRI calls from every client %v", passes, pods, own, sub(cri1, cri0))
	// Before the cache each pass made a PodSandboxStatus and a
	// ContainerStatus call before the sync and again after it for these
	// one-container pods. Now a pass reads only on a cache miss: when no
	// relist began since the pod's last read (resyncs are 5 s apart,
	// relists 1 s, so only a machine too loaded to relist on time misses),
	// one per five passes at most. ContainerStatus is not counted: the log
	// rotation asks it for every running container every 10 s, as the
	// kubelet's does.
	if misses, reads := own["cache_miss"], own["podsandbox_status"]; misses > passes/5 || reads > passes/5 {
		t.Fatalf("%v pod cache misses and %v PodSandboxStatus calls over %v resyncs of unchanged pods (%v); want the resyncs served from the pod cache", misses, reads, passes, own)
	}
	if own["cache_hit"] < passes/2 {
		t.Fatalf("the pod cache served %v of %v pod worker passes; want most", own["cache_hit"], passes)
	}
	if c1.sub(c0).creates != 0 || c1.sub(c0).starts != 0 {
		t.Fatalf("containers were created or started during the resyncs: %+v", c1.sub(c0))
	}
}

// podStateReads is podsyncd's own CRI reads of pod state
// (kubelet_runtime_operations_total by operation_type) and its pod cache's
// hits and misses (cache_hit, cache_miss).
func podStateReads(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := testenv.ScrapeMetrics(ctx, "http://"+addr+"/metrics")
	if err != nil {
		t.Fatalf("podsyncd metrics: %v", err)
	}
	out := map[string]float64{}
	for _, op := range []string{"container_status", "podsandbox_status", "list_containers", "list_podsandbox"} {
		out[op] = m.Sum("kubelet_runtime_operations_total", map[string]string{"operation_type": op})
	}
	for _, r := range []string{"hit", "miss"} {
		out["cache_"+r] = m.Sum("microlet_podsyncd_pod_cache_reads_total", map[string]string{"result": r})
	}
	return out
}

// sub is a - b by key.
func sub(a, b map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}
