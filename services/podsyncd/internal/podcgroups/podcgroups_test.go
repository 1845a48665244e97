package podcgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/microlet/microlet/internal/testenv"
)

func pod(uid string, reqs, lims corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "ns", UID: types.UID(uid)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c", Resources: corev1.ResourceRequirements{Requests: reqs, Limits: lims},
		}}},
	}
}

func rl(cpu, mem string) corev1.ResourceList {
	out := corev1.ResourceList{}
	if cpu != "" {
		out[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		out[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return out
}

func TestNames(t *testing.T) {
	n := Name{"kubepods", "burstable", "pod1234-ab"}
	if got, want := n.Cgroupfs(), "/kubepods/burstable/pod1234-ab"; got != want {
		t.Errorf("Cgroupfs = %q, want %q", got, want)
	}
	if got, want := n.Systemd(), "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab.slice"; got != want {
		t.Errorf("Systemd = %q, want %q", got, want)
	}
	for _, tc := range []struct{ driver, dir, want string }{
		{DriverCgroupfs, "pod1234-ab", "1234-ab"},
		{DriverCgroupfs, "burstable", ""},
		{DriverCgroupfs, "pod", ""},
		{DriverSystemd, "kubepods-burstable-pod1234_ab.slice", "1234-ab"},
		{DriverSystemd, "kubepods-pod12_3.slice", "12-3"},
		{DriverSystemd, "kubepods-burstable.slice", ""},
	} {
		if got := podUID(tc.driver, tc.dir); string(got) != tc.want {
			t.Errorf("podUID(%s, %q) = %q, want %q", tc.driver, tc.dir, got, tc.want)
		}
	}
	if _, err := ParseCgroupfs("relative"); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("ParseCgroupfs(relative) = %v, want an error naming absolute paths", err)
	}
	if n, err := ParseCgroupfs("/a/b/"); err != nil || len(n) != 2 || n[1] != "b" {
		t.Errorf("ParseCgroupfs(/a/b/) = %v, %v", n, err)
	}
}

// TestForPod checks ResourceConfigForPod's documented results.
func TestForPod(t *testing.T) {
	val := func(p *int64) string {
		if p == nil {
			return "unset"
		}
		return strconv.FormatInt(*p, 10)
	}
	uval := func(p *uint64) string {
		if p == nil {
			return "unset"
		}
		return strconv.FormatUint(*p, 10)
	}
	two := pod("x", rl("100m", "100Mi"), rl("200m", "200Mi"))
	two.Spec.Containers = append(two.Spec.Containers, corev1.Container{Name: "d", Resources: corev1.ResourceRequirements{Requests: rl("300m", ""), Limits: rl("", "50Mi")}})
	plr := pod("y", nil, nil)
	plr.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("500m", "64Mi"), Limits: rl("1", "128Mi")}
	// RuntimeClass overhead (spec.overhead, set by the RuntimeClass
	// admission plugin) counts in the pod cgroup's requests and non-zero
	// limits, as ResourceConfigForPod adds it.
	withOverhead := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Overhead = rl("250m", "120Mi")
		return p
	}
	for _, tc := range []struct {
		name                       string
		pod                        *corev1.Pod
		shares, quota, period, mem string
	}{
		{"guaranteed", pod("g", rl("500m", "64Mi"), rl("500m", "64Mi")), "512", "50000", "100000", "67108864"},
		{"burstable with both limits", pod("b", rl("100m", "32Mi"), rl("1", "64Mi")), "102", "100000", "100000", "67108864"},
		{"burstable, request only", pod("r", rl("250m", "32Mi"), nil), "256", "unset", "unset", "unset"},
		{"burstable, one container without a CPU limit", two, "409", "unset", "unset", "262144000"},
		{"besteffort", pod("e", nil, nil), "2", "unset", "unset", "unset"},
		{"pod-level resources", plr, "512", "100000", "100000", "134217728"},
		{"guaranteed with overhead", withOverhead(pod("go", rl("500m", "64Mi"), rl("500m", "64Mi"))), "768", "75000", "100000", "192937984"},
		{"burstable, request only, with overhead", withOverhead(pod("ro", rl("250m", "32Mi"), nil)), "512", "unset", "unset", "unset"},
		{"besteffort with overhead", withOverhead(pod("eo", nil, nil)), "2", "unset", "unset", "unset"},
	} {
		r := ForPod(tc.pod, true, 100000)
		got := []string{uval(r.CPUShares), val(r.CPUQuota), uval(r.CPUPeriod), val(r.Memory)}
		want := []string{tc.shares, tc.quota, tc.period, tc.mem}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: shares quota period memory = %v, want %v", tc.name, got, want)
		}
	}
	if r := ForPod(pod("g", rl("1", "1Gi"), rl("1", "1Gi")), false, 100000); r.CPUQuota == nil || *r.CPUQuota != -1 {
		t.Errorf("quota without CPU limit enforcement = %s, want -1", val(r.CPUQuota))
	}
}

func readInt(t *testing.T, dir, file string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s/%s: %v", dir, file, err)
	}
	return v
}

// TestManagerOnHost creates the hierarchy in the host's cgroup v1 tree
// under a test root and reads the limits back from cgroupfs.
func TestManagerOnHost(t *testing.T) {
	testenv.RequireRoot(t, "writing cgroupfs")
	if cgroups.IsCgroup2UnifiedMode() {
		testenv.RequireOrSkip(t, "reads cgroup v1 files; this host has cgroup v2")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		testenv.RequireOrSkip(t, "no cgroup v1 memory controller: %v", err)
	}
	root := "/microlet-unit-" + rand.String(6)
	active := []*corev1.Pod{}
	m, err := New(Config{
		Driver: DriverCgroupfs, Root: root, PodPidsLimit: 321,
		NodeAllocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		ActivePods:      func() []*corev1.Pod { return active },
	})
	if err != nil {
		t.Fatal(err)
	}
	rootName, _ := ParseCgroupfs(root)
	t.Cleanup(func() {
		if err := m.destroy(rootName); err != nil {
			t.Errorf("remove test root: %v", err)
		}
	})
	mem := "/sys/fs/cgroup/memory" + root + "/kubepods"
	cpu := "/sys/fs/cgroup/cpu" + root + "/kubepods"
	if got := readInt(t, mem, "memory.limit_in_bytes"); got != 1<<30 {
		t.Errorf("kubepods memory limit %d, want %d", got, 1<<30)
	}
	if got := readInt(t, cpu, "cpu.shares"); got != 1536 {
		t.Errorf("kubepods shares %d, want 1536", got)
	}
	if got := readInt(t, cpu+"/besteffort", "cpu.shares"); got != 2 {
		t.Errorf("besteffort shares %d, want 2", got)
	}

	g := pod("guaranteed-"+rand.String(4), rl("500m", "64Mi"), rl("500m", "64Mi"))
	b := pod("burstable-"+rand.String(4), rl("250m", "32Mi"), rl("", "128Mi"))
	e := pod("besteffort-"+rand.String(4), nil, nil)
	active = []*corev1.Pod{g, b, e}
	for _, p := range active {
		if err := m.EnsurePod(p); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := m.Parent(b), root+"/kubepods/burstable/pod"+string(b.UID); got != want {
		t.Errorf("Parent = %q, want %q", got, want)
	}
	gp := "/kubepods/pod" + string(g.UID)
	if got := readInt(t, mem+gp[len("/kubepods"):], "memory.limit_in_bytes"); got != 64<<20 {
		t.Errorf("guaranteed memory %d", got)
	}
	if got := readInt(t, cpu+gp[len("/kubepods"):], "cpu.cfs_quota_us"); got != 50000 {
		t.Errorf("guaranteed quota %d", got)
	}
	if got := readInt(t, cpu+gp[len("/kubepods"):], "cpu.shares"); got != 512 {
		t.Errorf("guaranteed shares %d", got)
	}
	if got := readInt(t, "/sys/fs/cgroup/pids"+root+gp, "pids.max"); got != 321 {
		t.Errorf("guaranteed pids.max %d, want 321", got)
	}
	bp := "/burstable/pod" + string(b.UID)
	if got := readInt(t, mem+bp, "memory.limit_in_bytes"); got != 128<<20 {
		t.Errorf("burstable memory %d", got)
	}
	if got := readInt(t, cpu+bp, "cpu.cfs_quota_us"); got != -1 {
		t.Errorf("burstable quota %d, want -1 (no CPU limit)", got)
	}
	if got := readInt(t, cpu+"/burstable", "cpu.shares"); got != 256 {
		t.Errorf("burstable QoS shares %d, want 256 (the Burstable pod's request)", got)
	}
	ep := "/besteffort/pod" + string(e.UID)
	if got := readInt(t, cpu+ep, "cpu.shares"); got != 2 {
		t.Errorf("besteffort pod shares %d", got)
	}
	found, err := m.Pods()
	if err != nil || len(found) != 3 {
		t.Fatalf("Pods() = %v, %v; want the three pods", found, err)
	}

	if err := m.DestroyPod(g.UID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mem + gp[len("/kubepods"):]); !os.IsNotExist(err) {
		t.Errorf("guaranteed pod cgroup still there after DestroyPod: %v", err)
	}
	// Housekeeping removes what keep does not claim.
	m.Housekeeping(func(uid types.UID) bool { return uid == b.UID })
	if _, err := os.Stat(cpu + ep); !os.IsNotExist(err) {
		t.Errorf("orphaned besteffort cgroup not removed: %v", err)
	}
	if _, err := os.Stat(cpu + bp); err != nil {
		t.Errorf("kept burstable cgroup removed: %v", err)
	}
}

// TestHugePages: the pod cgroup's hugetlb limits are the pod's
// hugepages-<size> requests for every QoS class, every other page size the
// host has is limited to 0, and kubepods gets the allocatable huge pages.
// (This machine's cgroup v1 tree has no hugetlb controller, so the limits
// are not written on it; the kubelet skips them the same way.)
func TestHugePages(t *testing.T) {
	g := pod("hp", rl("1", "64Mi"), rl("1", "64Mi"))
	c := &g.Spec.Containers[0].Resources
	c.Requests["hugepages-2Mi"], c.Limits["hugepages-2Mi"] = resource.MustParse("4Mi"), resource.MustParse("4Mi")
	g.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"hugepages-2Mi": resource.MustParse("8Mi"), corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{"hugepages-2Mi": resource.MustParse("8Mi"), corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	}}}
	r := ForPod(g, true, 100000)
	if len(r.HugePageLimits) != 1 || r.HugePageLimits[2<<20] != 8<<20 {
		t.Errorf("pod huge page limits %v, want 2Mi pages: 8Mi (the larger init container's)", r.HugePageLimits)
	}
	got := map[string]uint64{}
	for _, l := range hugetlbLimits(r.HugePageLimits, []string{"2MB", "1GB", "64KB"}) {
		got[l.Pagesize] = l.Limit
	}
	if want := map[string]uint64{"2MB": 8 << 20, "1GB": 0, "64KB": 0}; len(got) != 3 || got["2MB"] != want["2MB"] || got["1GB"] != 0 || got["64KB"] != 0 {
		t.Errorf("hugetlb limits %v, want %v", got, want)
	}
	if r := ForPod(pod("be", nil, nil), true, 100000); r.HugePageLimits == nil || len(r.HugePageLimits) != 0 {
		t.Errorf("a pod without huge pages: %v, want an empty (all sizes 0) map", r.HugePageLimits)
	}
	n := ForNode(corev1.ResourceList{"hugepages-1Gi": resource.MustParse("2Gi"), corev1.ResourceCPU: resource.MustParse("2")})
	if len(n.HugePageLimits) != 1 || n.HugePageLimits[1<<30] != 2<<30 {
		t.Errorf("kubepods huge page limits %v, want 1Gi pages: 2Gi", n.HugePageLimits)
	}
	if n := ForNode(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}); n.HugePageLimits != nil {
		t.Errorf("allocatable without huge pages: kubepods limits %v, want hugetlb left alone", n.HugePageLimits)
	}
}
