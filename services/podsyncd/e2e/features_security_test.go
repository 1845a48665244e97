package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// TestPodSecurity runs issue 11's security-context and resource scenarios on
// the real stack: a Burstable pod with runAsUser/runAsGroup/
// supplementalGroups/fsGroup, a read-only root, no privilege escalation, a
// disk and a memory emptyDir; and a Guaranteed pod. What the processes get
// is read inside the containers through the CRI's ExecSync.
func TestPodSecurity(t *testing.T) {
	s := startStack(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()
	dataDir := filepath.Join(filepath.Dir(s.runDir), "data")
	// A failed run must not leave tmpfs mounts behind under the temp dir.
	t.Cleanup(func() { unmountUnder(dataDir) })

	memTotal := machineMemory(t)
	const (
		burstRequest = 32 << 20
		burstLimit   = 64 << 20
		guarMemory   = 48 << 20
		memVolume    = 16 << 20
	)

	burst := s.Pod("secure", corev1.RestartPolicyAlways, "sleep 3600")
	burst.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000),
		SupplementalGroups: []int64{4000}, FSGroup: ptr.To[int64](2000),
	}
	burst.Spec.Volumes = []corev1.Volume{
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		{Name: "mem", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
			Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(memVolume, resource.BinarySI)}}},
	}
	c := &burst.Spec.Containers[0]
	c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "mem", MountPath: "/mem"}}
	c.SecurityContext = &corev1.SecurityContext{
		ReadOnlyRootFilesystem:   ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	c.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: *resource.NewQuantity(burstRequest, resource.BinarySI)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: *resource.NewQuantity(burstLimit, resource.BinarySI)},
	}

	guar := s.Pod("guaranteed", corev1.RestartPolicyAlways, "sleep 3600")
	guar.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: *resource.NewQuantity(guarMemory, resource.BinarySI)},
	}
	// Both start at once: each pod start can take minutes on a loaded engine.
	s.Create(burst)
	s.Create(guar)

	running := func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}

	t.Run("user, groups, fsGroup-owned emptyDir, read-only root, no_new_privs", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "secure", "running", running)
		if p.Status.QOSClass != corev1.PodQOSBurstable {
			t.Errorf("qosClass = %s, want Burstable", p.Status.QOSClass)
		}
		ids := strings.Fields(s.execIn(p, "main", "sh", "-c", "id -u; id -g; id -G"))
		if len(ids) < 3 || ids[0] != "1000" || ids[1] != "3000" || !slices.Contains(ids[2:], "2000") || !slices.Contains(ids[2:], "4000") {
			t.Errorf("id -u, -g, -G = %q, want uid 1000, gid 3000 and groups 2000 (fsGroup) and 4000", ids)
		}
		// The emptyDir belongs to the fsGroup with the setgid bit, so what
		// the container writes there belongs to the group too.
		if out := s.execIn(p, "main", "stat", "-c", "%g %a", "/scratch"); strings.TrimSpace(out) != "2000 2777" {
			t.Errorf("emptyDir group and mode = %q, want \"2000 2777\"", out)
		}
		if out := s.execIn(p, "main", "sh", "-c", "echo hi > /scratch/f && stat -c %g /scratch/f"); strings.TrimSpace(out) != "2000" {
			t.Errorf("new file's group = %q, want 2000", out)
		}
		if out, code := s.execCode(p, "main", "sh", "-c", "echo x > /rootfs-write"); code == 0 {
			t.Errorf("write to the read-only root filesystem succeeded: %q", out)
		}
		if out := s.execIn(p, "main", "grep", "NoNewPrivs", "/proc/1/status"); !strings.HasSuffix(strings.TrimSpace(out), "1") {
			t.Errorf("NoNewPrivs = %q, want 1 (allowPrivilegeEscalation: false)", out)
		}
		if out := s.execIn(p, "main", "grep", "CapBnd", "/proc/1/status"); !strings.HasSuffix(strings.TrimSpace(out), "0000000000000000") {
			t.Errorf("capability bounding set = %q, want empty (drop ALL)", out)
		}
	})

	t.Run("memory-medium emptyDir is a tmpfs of the sizeLimit", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "secure", "running", running)
		mounts := s.execIn(p, "main", "cat", "/proc/mounts")
		var line string
		for _, l := range strings.Split(mounts, "\n") {
			if f := strings.Fields(l); len(f) > 3 && f[1] == "/mem" {
				line = l
			}
		}
		if !strings.HasPrefix(line, "tmpfs /mem tmpfs ") || !strings.Contains(line, fmt.Sprintf("size=%dk", memVolume>>10)) {
			t.Errorf("/mem mount = %q, want a tmpfs of size=%dk", line, memVolume>>10)
		}
		if out := s.execIn(p, "main", "sh", "-c", "echo in-memory > /mem/f && cat /mem/f"); out != "in-memory\n" {
			t.Errorf("tmpfs write/read = %q", out)
		}
	})

	t.Run("memory and CPU limits and OOM score adjustment of a Burstable pod", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "secure", "running", running)
		if got := memoryLimitIn(s, p); got != burstLimit {
			t.Errorf("memory limit inside = %d, want %d", got, burstLimit)
		}
		if got := cpuQuotaIn(s, p); got != "50000 100000" {
			t.Errorf("CFS quota/period inside = %q, want 50000 100000 (500m)", got)
		}
		// The kubelet's Burstable formula, with the machine's MemTotal.
		want := 1000 - 1000*int64(burstRequest)/memTotal
		want = min(max(want, 3), 999)
		if got := oomScoreAdjIn(s, p); got != want {
			t.Errorf("oom_score_adj = %d, want %d (1000 - 1000*request/MemTotal)", got, want)
		}
	})

	t.Run("Guaranteed pod: QoS class, memory limit, OOM score adjustment", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "guaranteed", "running", running)
		if p.Status.QOSClass != corev1.PodQOSGuaranteed {
			t.Errorf("qosClass = %s, want Guaranteed", p.Status.QOSClass)
		}
		if got := memoryLimitIn(s, p); got != guarMemory {
			t.Errorf("memory limit inside = %d, want %d", got, guarMemory)
		}
		// -997, unless this host may not lower OOM scores (no
		// CAP_SYS_RESOURCE), where runtime-shim clamps it to 0.
		want := int64(-997)
		if !hostHasSysResource(t) {
			want = 0
		}
		if got := oomScoreAdjIn(s, p); got != want {
			t.Errorf("oom_score_adj = %d, want %d", got, want)
		}
	})

	s.t = t
	s.deletePod("secure")
	s.deletePod("guaranteed")
	// Removing the deleted pod (after its API object is gone) unmounts its
	// memory-backed emptyDir.
	s.Eventually("the memory emptyDir unmounted", 3*time.Minute, func() (bool, string) {
		m := mountsUnder(dataDir)
		return len(m) == 0, fmt.Sprintf("still mounted: %v", m)
	})
}

// memoryLimitIn reads the container's memory limit from its cgroup (v2 or v1).
func memoryLimitIn(s *stack, p *corev1.Pod) int64 {
	out := s.execIn(p, "main", "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
	v, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		s.t.Fatalf("memory limit %q: %v", out, err)
	}
	return v
}

// cpuQuotaIn reads "quota period" from the container's cgroup (v2 or v1).
func cpuQuotaIn(s *stack, p *corev1.Pod) string {
	out := s.execIn(p, "main", "sh", "-c", "cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)")
	return strings.TrimSpace(out)
}

func oomScoreAdjIn(s *stack, p *corev1.Pod) int64 {
	out := s.execIn(p, "main", "cat", "/proc/1/oom_score_adj")
	v, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		s.t.Fatalf("oom_score_adj %q: %v", out, err)
	}
	return v
}

func machineMemory(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb * 1024
		}
	}
	t.Fatal("no MemTotal in /proc/meminfo")
	return 0
}

// hostHasSysResource says whether processes here may lower OOM scores
// (CAP_SYS_RESOURCE, bit 24, in the bounding set Docker's containers get).
func hostHasSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapBnd:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return mask&(1<<24) != 0
		}
	}
	return false
}

// mountsUnder lists mount points below dir.
func mountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 1 && strings.HasPrefix(fields[1], dir+"/") {
			out = append(out, fields[1])
		}
	}
	return out
}

func unmountUnder(dir string) {
	for _, m := range mountsUnder(dir) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}
