package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/microlet/microlet/internal/procinfo"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
	"github.com/microlet/microlet/internal/testenv/node"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

// DurationEnv sets the fault phase's length (a Go duration); `make soak`
// passes DURATION there. make test runs the short form.
const DurationEnv = "MICROLET_SOAK_DURATION"

// SeedEnv replays a run: the seed a failed run printed picks the same
// faults in the same order and the same pod churn (`make soak SEED=`).
const SeedEnv = "MICROLET_SOAK_SEED"

// Knobs of the run.
const (
	defaultDuration = 3 * time.Minute
	// livePods is how many pods the churn keeps alive.
	livePods = 8
	// warmUp is the churn before the first fault, and the moment the
	// memory baseline is taken.
	warmUp = 30 * time.Second
	// maxStatusWritesPerPod bounds the pods/status writes per pod
	// lifecycle. Crash-looping pods write at every restart; measured runs
	// of this mix (docs/soak.md) stay well below it.
	maxStatusWritesPerPod = 12
	// memorySlack is how much a service's RSS may grow over the run: Go's
	// heap breathes, a leak grows without bound.
	memoryFactor = 1.5
	memorySlack  = 32 << 20
)

// TestSoak runs one connected node under pod churn while a fault
// injector kills its services, restarts its runtime, stops the API server
// and fills its disk, and checks the invariants all along and at the end
// (issue #33). It prints one summary table.
func TestSoak(t *testing.T) {
	d := defaultDuration
	if s := os.Getenv(DurationEnv); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d < time.Minute {
			t.Fatalf("%s=%q: want a Go duration of at least 1m", DurationEnv, s)
		}
	}
	outage := min(60*time.Second, d/6)
	n := node.Start(t, node.Options{DataDirSize: "256m"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := "soak-" + rand.String(4)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(SeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: want the unsigned integer a run printed as its seed", SeedEnv, s)
		}
	}
	events := &testenv.LockedBuffer{}
	logf := func(format string, args ...any) {
		line := time.Now().Format("15:04:05 ") + fmt.Sprintf(format, args...)
		_, _ = events.Write([]byte(line + "\n"))
		t.Log(line)
	}
	logf("soak %s: seed %d, faults for %s, outages %s", run, seed, d, outage)
	createVolumeSources(t, n)
	f, err := newInjector(n, seed, outage, logf)
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens, the API server runs again when the test ends.
	t.Cleanup(func() { _ = syscall.Kill(f.apiPID, syscall.SIGCONT) })

	v := newViolations()
	writes0 := statusWrites(t, n)
	c := newChurn(n, run, livePods, seed)
	done := make(chan struct{}, 3)
	churnCtx, stopChurn := context.WithCancel(ctx)
	monCtx, stopMonitor := context.WithCancel(ctx)
	go func() { c.loop(churnCtx); done <- struct{}{} }()
	go func() { monitor(monCtx, n, run, v); done <- struct{}{} }()
	sleep(ctx, warmUp)
	mem0 := memory(t, f)
	faultCtx, stopFaults := context.WithTimeout(ctx, d)
	start := time.Now()
	go func() { f.run(faultCtx, d); done <- struct{}{} }()
	<-faultCtx.Done()
	<-done // the injector has undone its last fault
	stopFaults()
	stopChurn()
	<-done
	logf("faults over after %s; %d pods created; settling", time.Since(start).Round(time.Second), c.created)

	// The node recovers: every service serves and the Node is Ready.
	until(ctx, 3*time.Minute, func() bool { return allServing(ctx, f) == "" })
	msg := allServing(ctx, f)
	v.check(invServiceUp, msg == "", msg)
	until(ctx, 2*time.Minute, func() bool { ok, _ := node.NodeReady(ctx, n.Admin, n.Name); return ok })
	ok, msg := node.NodeReady(ctx, n.Admin, n.Name)
	v.check(invNodeReady, ok, msg)

	var live []tracked
	var uids []types.UID
	for _, p := range c.snapshot() {
		uids = append(uids, p.uid)
		if p.deleted.IsZero() && p.kind != nil {
			live = append(live, p)
		}
	}
	checkReached(ctx, n, live, 4*time.Minute, v)
	checkAcknowledged(ctx, n, live, time.Minute, v)
	stopMonitor()
	<-done
	mem1 := memory(t, f)
	checkMemory(mem0, mem1, v)

	for _, p := range live {
		err := n.Admin.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, p.name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete pod %s: %v", p.name, err)
		}
	}
	checkGone(ctx, n, run, 4*time.Minute, v)
	checkNoLeak(ctx, n, uids, 3*time.Minute, v)
	writes := statusWrites(t, n) - writes0
	perPod := writes / float64(max(c.created, 1))
	v.check(invWrites, perPod <= maxStatusWritesPerPod,
		fmt.Sprintf("%.1f pods/status writes per pod lifecycle (%.0f writes, %d pods), more than %d", perPod, writes, c.created, maxStatusWritesPerPod))

	counts, failures := f.injected()
	for _, fl := range failures {
		v.check(invInjected, false, fl)
	}
	for _, once := range []string{"runtime restart", "API server stopped", "data disk full"} {
		v.check(invInjected, counts[once] == 1, fmt.Sprintf("%s injected %d times, not once", once, counts[once]))
	}
	summary := report(d, c, counts, v, writes, perPod, mem0, mem1)
	t.Log("\n" + summary)
	if v.total() > 0 {
		dir := keepEvidence(t, n, run, summary, events.String(), v)
		t.Errorf("%d invariant violations; evidence in %s", v.total(), dir)
	}
}

// createVolumeSources creates the configMap and secret the pods mount.
func createVolumeSources(t *testing.T, n *node.Node) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configName}, Data: map[string]string{"greeting": "soak"}}
	if _, err := n.Admin.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName}, StringData: map[string]string{"token": "soak"}}
	if _, err := n.Admin.CoreV1().Secrets(metav1.NamespaceDefault).Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// statusWrites is the API server's count of pods/status writes (PATCH and
// PUT). Only the node writes pod status in this test's control plane.
func statusWrites(t *testing.T, n *node.Node) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, err := n.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("apiserver /metrics: %v", err)
	}
	m, err := testenv.ParseMetrics(body)
	if err != nil {
		t.Fatal(err)
	}
	match := func(verb string) map[string]string {
		return map[string]string{"verb": verb, "resource": "pods", "subresource": "status"}
	}
	return m.Sum("apiserver_request_total", match("PATCH")) + m.Sum("apiserver_request_total", match("PUT"))
}

// sample is one service's memory at one moment.
type sample struct {
	pid int32
	rss uint64
}

// memory samples every service's RSS.
func memory(t *testing.T, f *injector) map[string]sample {
	t.Helper()
	cs, err := f.components(context.Background())
	if err != nil {
		t.Fatalf("list the node's services: %v", err)
	}
	out := map[string]sample{}
	for name, c := range cs {
		if u, err := procinfo.Of(int(c.GetPid())); err == nil {
			out[name] = sample{pid: c.GetPid(), rss: u.RSS}
		}
	}
	return out
}

// checkMemory compares each service's RSS at the end with its baseline:
// none may have grown beyond memoryFactor plus memorySlack. A service the
// injector restarted is held to the same bound: a fresh process that needs
// more than that after the run is as telling as one that grew.
func checkMemory(before, after map[string]sample, v *violations) {
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			continue
		}
		limit := uint64(float64(b.rss)*memoryFactor) + memorySlack
		v.check(invMemory, a.rss <= limit, fmt.Sprintf("%s grew from %d MiB to %d MiB RSS", name, b.rss>>20, a.rss>>20))
	}
}

// allServing is "" when the supervisor reports every service serving, or
// which are not.
func allServing(ctx context.Context, f *injector) string {
	cs, err := f.components(ctx)
	if err != nil {
		return err.Error()
	}
	var bad []string
	for name, c := range cs {
		if c.GetHealth() != supervisorv1.Health_HEALTH_SERVING {
			bad = append(bad, fmt.Sprintf("%s is %s", name, c.GetHealth()))
		}
	}
	sort.Strings(bad)
	return strings.Join(bad, ", ")
}

// report is the run's summary table.
func report(d time.Duration, c *churn, faults map[string]int, v *violations, writes, perPod float64, mem0, mem1 map[string]sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak summary: faults for %s, %d pods created\n", d, c.created)
	names := make([]string, 0, len(faults))
	total := 0
	for k, n := range faults {
		names = append(names, k)
		total += n
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "%-52s %8s\n", "fault", "injected")
	for _, k := range names {
		fmt.Fprintf(&b, "%-52s %8d\n", k, faults[k])
	}
	fmt.Fprintf(&b, "%-52s %8d\n", "total", total)
	c.mu.Lock()
	fmt.Fprintf(&b, "%-52s %4d of %d\n", "pods in their asked-for state when deleted", c.deletedReached, c.deletedAll)
	for _, verb := range []string{"create", "delete", "list"} {
		fmt.Fprintf(&b, "%-52s %8d\n", "churn API calls failed during faults: "+verb, c.errors[verb])
	}
	c.mu.Unlock()
	fmt.Fprintf(&b, "%-52s %8.0f (%.2f per pod)\n", "pods/status writes", writes, perPod)
	svcs := make([]string, 0, len(mem1))
	for k := range mem1 {
		svcs = append(svcs, k)
	}
	sort.Strings(svcs)
	for _, s := range svcs {
		restarted := ""
		if mem0[s].pid != mem1[s].pid {
			restarted = " (restarted)"
		}
		fmt.Fprintf(&b, "%-52s %4d -> %d MiB%s\n", "RSS "+s, mem0[s].rss>>20, mem1[s].rss>>20, restarted)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	invs := make([]string, 0, len(v.checks))
	for k := range v.checks {
		invs = append(invs, k)
	}
	sort.Strings(invs)
	fmt.Fprintf(&b, "%-60s %8s %10s\n", "invariant", "checks", "violations")
	checks, violated := 0, 0
	for _, k := range invs {
		fmt.Fprintf(&b, "%-60s %8d %10d\n", k, v.checks[k], len(v.found[k]))
		checks += v.checks[k]
		violated += len(v.found[k])
	}
	fmt.Fprintf(&b, "%-60s %8d %10d\n", "total", checks, violated)
	for _, k := range invs {
		for _, m := range v.found[k] {
			fmt.Fprintf(&b, "VIOLATION %s: %s\n", k, m)
		}
	}
	return b.String()
}

// keepEvidence writes the summary, the fault log, the pods and microlet's
// output to _output/soak/<run> in the repository, and returns the dir.
func keepEvidence(t *testing.T, n *node.Node, run, summary, events string, v *violations) string {
	root, err := controlplane.RepoRoot()
	if err != nil {
		root = os.TempDir()
	}
	dir := filepath.Join(root, "_output", "soak", run)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep evidence: %v", err)
		return dir
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Logf("keep evidence: %v", err)
		}
	}
	write("summary.txt", summary)
	write("faults.log", events)
	write("microlet.log", n.Out.String())
	if list, err := n.Admin.CoreV1().Pods(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{}); err == nil {
		b, _ := json.MarshalIndent(list, "", "  ")
		write("pods.json", string(b))
	}
	if list, err := n.Admin.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{}); err == nil {
		b, _ := json.MarshalIndent(list, "", "  ")
		write("events.json", string(b))
	}
	return dir
}
