package stats

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
)

// podWorld is a fake runtime with pods and their files on disk.
type podWorld struct {
	h       *hostFixture
	clk     *clocktesting.FakePassiveClock
	rt      *fakeRuntime
	img     *fakeImages
	p       *Provider
	podsDir string
	logsDir string
}

func sandbox(id, name, ns, uid string, state runtimeapi.PodSandboxState, created time.Time) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id: id, State: state, CreatedAt: created.UnixNano(),
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid},
		Labels:   map[string]string{kubelettypes.KubernetesPodNameLabel: name, kubelettypes.KubernetesPodNamespaceLabel: ns, kubelettypes.KubernetesPodUIDLabel: uid},
	}
}

func ctr(id, sb, name string, attempt uint32, state runtimeapi.ContainerState, created time.Time) *runtimeapi.Container {
	return &runtimeapi.Container{
		Id: id, PodSandboxId: sb, State: state, CreatedAt: created.UnixNano(),
		Metadata: &runtimeapi.ContainerMetadata{Name: name, Attempt: attempt},
		Labels:   map[string]string{kubelettypes.KubernetesContainerNameLabel: name},
	}
}

// ctrStats is one container sample: cpu core-ns, working set, rss.
func ctrStats(id, name string, at time.Time, cpu, ws, rss uint64, wl *runtimeapi.FilesystemUsage) *runtimeapi.ContainerStats {
	return &runtimeapi.ContainerStats{
		Attributes:    &runtimeapi.ContainerAttributes{Id: id, Metadata: &runtimeapi.ContainerMetadata{Name: name}},
		Cpu:           &runtimeapi.CpuUsage{Timestamp: at.UnixNano(), UsageCoreNanoSeconds: u64(cpu)},
		Memory:        &runtimeapi.MemoryUsage{Timestamp: at.UnixNano(), WorkingSetBytes: u64(ws), UsageBytes: u64(ws + 10), RssBytes: u64(rss)},
		WritableLayer: wl,
	}
}

// newPodWorld: default/web (uid u1) runs app and sidecar in sandbox s1;
// its earlier sandbox s0 is not ready and an exited attempt of app
// remains; jobs/batch has one not-ready sandbox s2 and no running
// container; s3 names no pod.
func newPodWorld(t *testing.T) *podWorld {
	t.Helper()
	w := &podWorld{h: newHostFixture(t, true), clk: clocktesting.NewFakePassiveClock(t0), rt: newFakeRuntime()}
	data := t.TempDir()
	w.podsDir, w.logsDir = filepath.Join(data, "pods"), filepath.Join(data, "logs")
	w.img = &fakeImages{fs: []*runtimeapi.FilesystemUsage{{Timestamp: t0.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: data}, UsedBytes: u64(1)}}}
	w.p = New(w.rt, w.img, WithNodeName("node-a"), WithRootDir(data), WithPodsDir(w.podsDir), WithPodLogsDir(w.logsDir),
		WithProcRoot(w.h.proc), WithCgroupRoot(w.h.cgroup), WithClock(w.clk), WithLogger(quietLogger()), WithVolumeStatsPeriod(time.Minute))

	created := t0.Add(-time.Hour)
	w.rt.sandboxes = []*runtimeapi.PodSandbox{
		sandbox("s0", "web", "default", "u0", runtimeapi.PodSandboxState_SANDBOX_NOTREADY, created.Add(-time.Hour)),
		sandbox("s1", "web", "default", "u1", runtimeapi.PodSandboxState_SANDBOX_READY, created),
		sandbox("s2", "batch", "jobs", "u2", runtimeapi.PodSandboxState_SANDBOX_NOTREADY, created),
		{Id: "s3", State: runtimeapi.PodSandboxState_SANDBOX_READY},
	}
	w.rt.containers = []*runtimeapi.Container{
		ctr("c0", "s0", "app", 0, runtimeapi.ContainerState_CONTAINER_EXITED, created.Add(-time.Hour)),
		ctr("c1old", "s1", "app", 0, runtimeapi.ContainerState_CONTAINER_EXITED, created.Add(time.Minute)),
		ctr("c1", "s1", "app", 1, runtimeapi.ContainerState_CONTAINER_RUNNING, created.Add(2*time.Minute)),
		ctr("c2", "s1", "sidecar", 0, runtimeapi.ContainerState_CONTAINER_RUNNING, created.Add(3*time.Minute)),
		ctr("c3", "s2", "work", 0, runtimeapi.ContainerState_CONTAINER_EXITED, created),
	}
	w.rt.info["s1"] = map[string]string{"info": `{"pid":4242,"inDocker":true}`}
	w.h.write(w.h.proc, "4242/net/dev", netDev(map[string][4]uint64{"lo": {1, 0, 1, 0}, "eth0": {111, 0, 222, 0}}))
	w.setStats(t0, 0)

	// Files: an emptyDir with 1 MiB, a secret, etc-hosts, logs.
	w.writeFile(filepath.Join(w.podsDir, "u1/volumes", pluginEmptyDir, "cache/blob"), 1<<20)
	w.writeFile(filepath.Join(w.podsDir, "u1/volumes/kubernetes.io~secret/token/token"), 100)
	w.writeFile(filepath.Join(w.podsDir, "u1", etcHostsFile), 200)
	w.writeFile(filepath.Join(w.logsDir, "default_web_u1/app/1.log"), 5000)
	w.writeFile(filepath.Join(w.logsDir, "default_web_u1/app/0.log"), 3000)
	w.writeFile(filepath.Join(w.logsDir, "default_web_u1/sidecar/0.log"), 10)
	return w
}

// setStats sets the runtime's samples at time at, CPU advanced by extra
// core-ns for app.
func (w *podWorld) setStats(at time.Time, extra uint64) {
	wl := &runtimeapi.FilesystemUsage{Timestamp: at.UnixNano(), FsId: &runtimeapi.FilesystemIdentifier{Mountpoint: w.podsDir + "-missing"},
		UsedBytes: u64(4096), InodesUsed: u64(3)}
	w.rt.mu.Lock()
	defer w.rt.mu.Unlock()
	w.rt.sbStats = []*runtimeapi.PodSandboxStats{
		{
			Attributes: &runtimeapi.PodSandboxAttributes{Id: "s1"},
			Linux: &runtimeapi.LinuxPodSandboxStats{
				Cpu:    &runtimeapi.CpuUsage{Timestamp: at.UnixNano(), UsageCoreNanoSeconds: u64(2_000_000_000 + extra)},
				Memory: &runtimeapi.MemoryUsage{Timestamp: at.UnixNano(), WorkingSetBytes: u64(300 << 20), UsageBytes: u64(400 << 20)},
				Containers: []*runtimeapi.ContainerStats{
					ctrStats("c1", "app", at, 1_500_000_000+extra, 200<<20, 150<<20, wl),
					ctrStats("c1old", "app", at, 0, 0, 0, nil),
					ctrStats("c2", "sidecar", at, 500_000_000, 100<<20, 50<<20, nil),
					{Cpu: &runtimeapi.CpuUsage{}}, // no attributes: skipped
				},
			},
		},
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "s0"}, Linux: &runtimeapi.LinuxPodSandboxStats{}},
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "s2"}, Linux: &runtimeapi.LinuxPodSandboxStats{
			Containers: []*runtimeapi.ContainerStats{ctrStats("c3", "work", at, 9, 9, 9, nil)},
		}},
		{Attributes: &runtimeapi.PodSandboxAttributes{Id: "s3"}},
		nil,
	}
}

func (w *podWorld) writeFile(path string, size int) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(path, []byte(strings.Repeat("x", size)), 0o644); err != nil {
		panic(err)
	}
}

// blocks is what du counts for path (st_blocks in bytes).
func blocks(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Blocks) * 512
}

func findPod(s *statsv1alpha1.Summary, ns, name string) *statsv1alpha1.PodStats {
	for i := range s.Pods {
		if s.Pods[i].PodRef.Namespace == ns && s.Pods[i].PodRef.Name == name {
			return &s.Pods[i]
		}
	}
	return nil
}

func TestPodsFromCRI(t *testing.T) {
	w := newPodWorld(t)
	s, err := w.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	// default/web from its ready sandbox only, jobs/batch from its only
	// sandbox, the nameless one left out; sorted by namespace and name.
	var refs []statsv1alpha1.PodReference
	for _, p := range s.Pods {
		refs = append(refs, p.PodRef)
	}
	want := []statsv1alpha1.PodReference{{Name: "web", Namespace: "default", UID: "u1"}, {Name: "batch", Namespace: "jobs", UID: "u2"}}
	if len(refs) != 2 || refs[0] != want[0] || refs[1] != want[1] {
		t.Fatalf("pods %+v, want %+v", refs, want)
	}
	web := s.Pods[0]
	if !web.StartTime.Time.Equal(t0.Add(-time.Hour)) {
		t.Errorf("pod start %v", web.StartTime)
	}
	if len(s.Pods[1].Containers) != 0 {
		t.Errorf("batch containers %+v, want none running", s.Pods[1].Containers)
	}

	// Running containers only, the latest attempt, sorted by name.
	if len(web.Containers) != 2 || web.Containers[0].Name != "app" || web.Containers[1].Name != "sidecar" {
		t.Fatalf("containers %+v", web.Containers)
	}
	app, side := web.Containers[0], web.Containers[1]
	if !app.StartTime.Time.Equal(t0.Add(-time.Hour + 2*time.Minute)) {
		t.Errorf("app start %v, want the running attempt's", app.StartTime)
	}
	checkU64(t, "app cpu", app.CPU.UsageCoreNanoSeconds, 1_500_000_000)
	checkU64(t, "app ws", app.Memory.WorkingSetBytes, 200<<20)
	checkU64(t, "app rss", app.Memory.RSSBytes, 150<<20)
	if app.CPU.UsageNanoCores != nil || web.CPU.UsageNanoCores != nil {
		t.Errorf("nanocores on the first scrape: app %v pod %v", app.CPU.UsageNanoCores, web.CPU.UsageNanoCores)
	}
	// Swap the runtime does not report is zero, as the kubelet fills it.
	checkU64(t, "app swap", app.Swap.SwapUsageBytes, 0)
	checkU64(t, "pod swap", web.Swap.SwapUsageBytes, 0)

	// Pod CPU and memory from the pod sample; RSS, missing there, from the
	// containers.
	checkU64(t, "pod cpu", web.CPU.UsageCoreNanoSeconds, 2_000_000_000)
	checkU64(t, "pod ws", web.Memory.WorkingSetBytes, 300<<20)
	checkU64(t, "pod usage", web.Memory.UsageBytes, 400<<20)
	checkU64(t, "pod rss", web.Memory.RSSBytes, 200<<20)

	// Network from the sandbox process's namespace.
	if web.Network == nil || web.Network.Name != "eth0" || *web.Network.RxBytes != 111 || len(web.Network.Interfaces) != 1 {
		t.Errorf("pod network %+v", web.Network)
	}

	// Rootfs from the writable layer (its filesystem is not visible: no
	// capacity); logs from the container's log files in the nodefs frame.
	if app.Rootfs == nil || *app.Rootfs.UsedBytes != 4096 || *app.Rootfs.InodesUsed != 3 || app.Rootfs.CapacityBytes != nil {
		t.Errorf("app rootfs %+v", app.Rootfs)
	}
	if side.Rootfs == nil || side.Rootfs.UsedBytes != nil {
		t.Errorf("sidecar rootfs %+v, want empty", side.Rootfs)
	}
	appLogs := blocks(t, filepath.Join(w.logsDir, "default_web_u1/app/0.log")) + blocks(t, filepath.Join(w.logsDir, "default_web_u1/app/1.log"))
	checkU64(t, "app logs", app.Logs.UsedBytes, appLogs)
	checkU64(t, "app log inodes", app.Logs.InodesUsed, 2)
	if *app.Logs.CapacityBytes != *s.Node.Fs.CapacityBytes {
		t.Errorf("logs capacity %d, nodefs %d", *app.Logs.CapacityBytes, *s.Node.Fs.CapacityBytes)
	}

	// Volumes: the emptyDir (ephemeral) first, then the secret.
	if len(web.VolumeStats) != 2 || web.VolumeStats[0].Name != "cache" || web.VolumeStats[1].Name != "token" {
		t.Fatalf("volumes %+v", web.VolumeStats)
	}
	cacheDir := filepath.Join(w.podsDir, "u1/volumes", pluginEmptyDir, "cache")
	cacheUsed := blocks(t, cacheDir) + blocks(t, filepath.Join(cacheDir, "blob"))
	cache := web.VolumeStats[0]
	checkU64(t, "cache used", cache.UsedBytes, cacheUsed)
	checkU64(t, "cache inodes", cache.InodesUsed, 2)
	if cacheUsed < 1<<20 || *cache.CapacityBytes == 0 || *cache.Inodes == 0 {
		t.Errorf("cache %+v", cache.FsStats)
	}

	// Ephemeral storage: writable layers + logs + emptyDir + etc-hosts;
	// not the secret.
	sideLogs := blocks(t, filepath.Join(w.logsDir, "default_web_u1/sidecar/0.log"))
	hosts := blocks(t, filepath.Join(w.podsDir, "u1", etcHostsFile))
	checkU64(t, "ephemeral used", web.EphemeralStorage.UsedBytes, 4096+appLogs+sideLogs+cacheUsed+hosts)
	checkU64(t, "ephemeral inodes", web.EphemeralStorage.InodesUsed, 3+2+1+2+1)
	if *web.EphemeralStorage.CapacityBytes != *s.Node.Fs.CapacityBytes {
		t.Errorf("ephemeral storage frame is not the nodefs")
	}
}

func TestPodNanoCoresAndCaches(t *testing.T) {
	w := newPodWorld(t)
	if _, err := w.p.Summary(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	// 10 s later app used 2.5 s more CPU; the pod sample too.
	w.clk.SetTime(t0.Add(10 * time.Second))
	w.setStats(t0.Add(10*time.Second), 2_500_000_000)
	s, err := w.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	web := findPod(s, "default", "web")
	checkU64(t, "app nanocores", web.Containers[0].CPU.UsageNanoCores, 250_000_000)
	checkU64(t, "sidecar nanocores", web.Containers[1].CPU.UsageNanoCores, 0)
	checkU64(t, "pod nanocores", web.CPU.UsageNanoCores, 250_000_000)

	// The sandbox's process is asked for once; the emptyDir walked once
	// per period.
	blob := filepath.Join(w.podsDir, "u1/volumes", pluginEmptyDir, "cache/blob2")
	w.writeFile(blob, 1<<20)
	s, err = w.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if n := w.rt.count("PodSandboxStatus"); n != 1 {
		t.Errorf("PodSandboxStatus called %d times, want 1", n)
	}
	before := *findPod(s, "default", "web").VolumeStats[0].UsedBytes
	w.clk.SetTime(t0.Add(80 * time.Second))
	s, err = w.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	after := findPod(s, "default", "web").VolumeStats[0]
	if *after.UsedBytes < before+1<<20 || !after.Time.Time.Equal(t0.Add(80*time.Second)) {
		t.Errorf("emptyDir after the period: used %d (before %d) at %v", *after.UsedBytes, before, after.Time)
	}

	// Gone containers and pods leave the caches after the TTL.
	w.rt.mu.Lock()
	w.rt.sandboxes, w.rt.containers, w.rt.sbStats = nil, nil, nil
	w.rt.mu.Unlock()
	w.clk.SetTime(t0.Add(rateCacheTTL + 2*time.Minute))
	if _, err := w.p.Summary(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if n := w.p.cpu.len(); n != 1 {
		t.Errorf("rate cache holds %d keys, want the node's only", n)
	}
	if len(w.p.pids.m) != 0 || len(w.p.du.m) != 0 {
		t.Errorf("pid cache %v, du cache %d entries", w.p.pids.m, len(w.p.du.m))
	}
}

func TestOnlyCPUAndMemoryPods(t *testing.T) {
	w := newPodWorld(t)
	s, err := w.p.Summary(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	web := findPod(s, "default", "web")
	if web == nil || web.CPU == nil || web.Memory == nil || web.Swap == nil || len(web.Containers) != 2 {
		t.Fatalf("web %+v", web)
	}
	if web.Network != nil || web.VolumeStats != nil || web.EphemeralStorage != nil || web.IO != nil {
		t.Errorf("only_cpu_and_memory pod has more: %+v", web)
	}
	for _, c := range web.Containers {
		if c.CPU == nil || c.Memory == nil || c.Swap == nil || c.Rootfs != nil || c.Logs != nil || c.IO != nil {
			t.Errorf("container %+v", c)
		}
	}
	if n := w.rt.count("PodSandboxStatus"); n != 0 {
		t.Errorf("PodSandboxStatus called %d times for CPU and memory", n)
	}
}

// TestContainerStatsFallback: a runtime without ListPodSandboxStats gets
// its pods from ListContainerStats, pod CPU and memory summed.
func TestContainerStatsFallback(t *testing.T) {
	w := newPodWorld(t)
	w.rt.setErr("ListPodSandboxStats", status.Error(codes.Unimplemented, "no"))
	w.rt.ctrStats = w.rt.sbStats[0].Linux.Containers
	s, err := w.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Pods) != 1 {
		t.Fatalf("pods %+v", s.Pods)
	}
	web := s.Pods[0]
	if web.PodRef.UID != "u1" || len(web.Containers) != 2 {
		t.Fatalf("web %+v", web)
	}
	checkU64(t, "pod cpu", web.CPU.UsageCoreNanoSeconds, 2_000_000_000)
	checkU64(t, "pod ws", web.Memory.WorkingSetBytes, 300<<20)
	checkU64(t, "pod usage", web.Memory.UsageBytes, 300<<20+20)
}

func TestPodErrors(t *testing.T) {
	for _, method := range []string{"ListPodSandbox", "ListContainers", "ListPodSandboxStats"} {
		t.Run(method, func(t *testing.T) {
			w := newPodWorld(t)
			w.rt.setErr(method, status.Error(codes.Unavailable, "runtime down"))
			_, err := w.p.Summary(context.Background(), true)
			if err == nil || !strings.Contains(err.Error(), "runtime down") {
				t.Fatalf("err %v", err)
			}
		})
	}
	t.Run("volumes unreadable", func(t *testing.T) {
		w := newPodWorld(t)
		if err := os.RemoveAll(w.podsDir); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(w.logsDir); err != nil {
			t.Fatal(err)
		}
		s, err := w.p.Summary(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		web := findPod(s, "default", "web")
		if web.VolumeStats != nil || web.Containers[0].Logs != nil {
			t.Errorf("web %+v", web)
		}
		// Only the writable layer is known.
		checkU64(t, "ephemeral used", web.EphemeralStorage.UsedBytes, 4096)
	})
}

func TestKeepSandboxesAndContainers(t *testing.T) {
	at := t0
	sb := func(id, name string, ready bool, age time.Duration) *runtimeapi.PodSandbox {
		st := runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		if ready {
			st = runtimeapi.PodSandboxState_SANDBOX_READY
		}
		return sandbox(id, name, "ns", id, st, at.Add(-age))
	}
	for _, tc := range []struct {
		name string
		in   []*runtimeapi.PodSandbox
		want []string
	}{
		{"alone and not ready", []*runtimeapi.PodSandbox{sb("a", "p", false, 0)}, []string{"a"}},
		{"ready wins", []*runtimeapi.PodSandbox{sb("a", "p", false, 0), sb("b", "p", true, time.Hour)}, []string{"b"}},
		{"none ready: latest", []*runtimeapi.PodSandbox{sb("a", "p", false, time.Hour), sb("b", "p", false, 0), sb("c", "p", false, 2*time.Hour)}, []string{"b"}},
		{"two ready", []*runtimeapi.PodSandbox{sb("a", "p", true, time.Hour), sb("b", "p", true, 0)}, []string{"a", "b"}},
		{"other pods apart", []*runtimeapi.PodSandbox{sb("a", "p", false, 0), sb("b", "q", false, 0), nil}, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := keepSandboxes(tc.in)
			if len(got) != len(tc.want) {
				t.Fatalf("kept %v, want %v", keys(got), tc.want)
			}
			for _, id := range tc.want {
				if _, ok := got[id]; !ok {
					t.Fatalf("kept %v, want %v", keys(got), tc.want)
				}
			}
		})
	}
	cs := keepContainers([]*runtimeapi.Container{
		ctr("old", "s", "app", 0, runtimeapi.ContainerState_CONTAINER_RUNNING, at),
		ctr("new", "s", "app", 1, runtimeapi.ContainerState_CONTAINER_RUNNING, at.Add(time.Second)),
		ctr("dead", "s", "app", 2, runtimeapi.ContainerState_CONTAINER_EXITED, at.Add(time.Hour)),
		ctr("other", "t", "app", 0, runtimeapi.ContainerState_CONTAINER_RUNNING, at),
		ctr("created", "s", "init", 0, runtimeapi.ContainerState_CONTAINER_CREATED, at),
		nil,
	})
	if len(cs) != 2 || cs["new"] == nil || cs["other"] == nil {
		t.Errorf("kept containers %v", keys(cs))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSandboxPIDFromInfo(t *testing.T) {
	for _, tc := range []struct {
		info map[string]string
		want int
	}{
		{map[string]string{"info": `{"pid":12,"inDocker":true}`}, 12},
		{map[string]string{"info": `{"pid":-3}`}, 0},
		{map[string]string{"info": `not json`}, 0},
		{map[string]string{"other": `{"pid":7}`}, 7},
		{nil, 0},
	} {
		if got := sandboxPIDFromInfo(tc.info); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.info, got, tc.want)
		}
	}
}

// TestOverlappingScrapesShareCRICalls: scrapes that overlap share one
// round of CRI calls, and one that gives up leaves it to the others.
func TestOverlappingScrapesShareCRICalls(t *testing.T) {
	w := newPodWorld(t)
	gate := make(chan struct{})
	w.rt.mu.Lock()
	w.rt.statsGate = gate
	w.rt.mu.Unlock()

	quitter, quit := context.WithCancel(context.Background())
	type result struct {
		s   *statsv1alpha1.Summary
		err error
	}
	results := make(chan result, 3)
	go func() { s, err := w.p.Summary(quitter, true); results <- result{s, err} }()
	testenvEventually(t, func() bool { return w.rt.count("ListPodSandboxStats") == 1 })
	go func() { s, err := w.p.Summary(context.Background(), true); results <- result{s, err} }()
	go func() { s, err := w.p.Summary(context.Background(), false); results <- result{s, err} }()
	quit()
	if r := <-results; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("the cancelled scrape returned %v", r.err)
	}
	// The others wait for the same round, whose first caller is gone.
	testenvEventually(t, func() bool {
		w.p.roundMu.Lock()
		defer w.p.roundMu.Unlock()
		return w.p.round != nil && w.p.round.callers == 3
	})
	close(gate)
	for range 2 {
		r := <-results
		if r.err != nil || findPod(r.s, "default", "web") == nil {
			t.Fatalf("scrape: %v", r.err)
		}
	}
	if n := w.rt.count("ListPodSandboxStats"); n != 1 {
		t.Errorf("ListPodSandboxStats called %d times for three overlapping scrapes", n)
	}
	// A later scrape makes a new round.
	if _, err := w.p.Summary(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if n := w.rt.count("ListPodSandboxStats"); n != 2 {
		t.Errorf("ListPodSandboxStats called %d times, want 2", n)
	}
}

// testenvEventually polls cond; the package's tests otherwise never wait.
func testenvEventually(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, "condition", 30*time.Second, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

// TestUnsafeNamesFromRuntime: names from the runtime that would leave the
// pod's directories are not used as paths.
func TestUnsafeNamesFromRuntime(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"u1", true}, {"a.b-c_d", true}, {"", false}, {".", false}, {"..", false}, {"../x", false}, {"a/b", false}, {"a\x00", false}} {
		if got := pathSafe(tc.name); got != tc.ok {
			t.Errorf("pathSafe(%q) = %v", tc.name, got)
		}
	}
	w := newPodWorld(t)
	// A pod dir outside the pods dir, which must not be measured.
	w.writeFile(filepath.Join(filepath.Dir(w.podsDir), "volumes", pluginEmptyDir, "x", "f"), 4096)
	w.rt.sandboxes[1].Metadata.Uid = ".."
	s, err := w.p.Summary(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	web := findPod(s, "default", "web")
	if web == nil || web.VolumeStats != nil || web.Containers[0].Logs != nil {
		t.Fatalf("web %+v", web)
	}
	checkU64(t, "ephemeral used", web.EphemeralStorage.UsedBytes, 4096)
}

// TestCRINetworkListsEveryInterface: the CRI gives the default interface
// apart from the others; the summary lists them all, the default one
// first, as the kubelet's (cAdvisor's) does, and e2e_node's Summary API
// spec requires a non-empty list for a pod with only eth0.
func TestCRINetworkListsEveryInterface(t *testing.T) {
	iface := func(name string, rx uint64) *runtimeapi.NetworkInterfaceUsage {
		return &runtimeapi.NetworkInterfaceUsage{Name: name, RxBytes: &runtimeapi.UInt64Value{Value: rx}}
	}
	for _, tc := range []struct {
		name       string
		in         *runtimeapi.NetworkUsage
		top        string
		wantListed []string
	}{
		{"default only", &runtimeapi.NetworkUsage{DefaultInterface: iface("eth0", 10)}, "eth0", []string{"eth0"}},
		{"default and others", &runtimeapi.NetworkUsage{DefaultInterface: iface("eth0", 10), Interfaces: []*runtimeapi.NetworkInterfaceUsage{iface("net1", 20)}}, "eth0", []string{"eth0", "net1"}},
		{"no default", &runtimeapi.NetworkUsage{Interfaces: []*runtimeapi.NetworkInterfaceUsage{iface("net1", 20)}}, "", []string{"net1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := criNetwork(tc.in, time.Unix(100, 0))
			var listed []string
			for _, i := range got.Interfaces {
				listed = append(listed, i.Name)
			}
			if got.Name != tc.top || strings.Join(listed, ",") != strings.Join(tc.wantListed, ",") {
				t.Errorf("top-level %q, listed %v; want %q, %v", got.Name, listed, tc.top, tc.wantListed)
			}
		})
	}
}
