package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/node"
)

// TestPodCgroups runs a Guaranteed, a Burstable and a BestEffort pod and
// reads their pod cgroups from the host's cgroup v1 tree: each sits in its
// QoS class's cgroup below the node's kubepods with the limits the kubelet
// gives it, the container runs inside it, and it is gone once the pod is
// deleted.
func TestPodCgroups(t *testing.T) {
	need := func(why string) { testenv.RequireOrSkip(t, "pod cgroups cannot be checked here: %s", why) }
	switch {
	case os.Geteuid() != 0:
		need("needs root: podsyncd writes cgroupfs")
	case cgroups.IsCgroup2UnifiedMode():
		need("reads cgroup v1 files; this host has cgroup v2")
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		need("no cgroup v1 memory controller")
	}
	const pidsLimit = 300
	s := startStack(t, "--pod-pids-limit="+strconv.Itoa(pidsLimit))
	root := node.CgroupRoot(s.Instance)

	rl := func(cpu, mem string) corev1.ResourceList {
		out := corev1.ResourceList{}
		if cpu != "" {
			out[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if mem != "" {
			out[corev1.ResourceMemory] = resource.MustParse(mem)
		}
		return out
	}
	guar := s.Pod("cg-guaranteed", corev1.RestartPolicyAlways, "sleep 3600")
	guar.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: rl("250m", "48Mi")}
	burst := s.Pod("cg-burstable", corev1.RestartPolicyAlways, "sleep 3600")
	burst.Spec.Containers[0].Resources = corev1.ResourceRequirements{Requests: rl("100m", "16Mi"), Limits: rl("", "64Mi")}
	best := s.Pod("cg-besteffort", corev1.RestartPolicyAlways, "sleep 3600")
	type want struct {
		dir                string
		shares, quota, mem int64
		qos                corev1.PodQOSClass
	}
	const unlimited = -1
	cases := map[string]*want{}
	for _, p := range []*corev1.Pod{guar, burst, best} {
		created := s.Create(p)
		uid := string(created.UID)
		switch p {
		case guar:
			cases[p.Name] = &want{"/kubepods/pod" + uid, 256, 25000, 48 << 20, corev1.PodQOSGuaranteed}
		case burst:
			cases[p.Name] = &want{"/kubepods/burstable/pod" + uid, 102, unlimited, 64 << 20, corev1.PodQOSBurstable}
		default:
			cases[p.Name] = &want{"/kubepods/besteffort/pod" + uid, 2, unlimited, unlimited, corev1.PodQOSBestEffort}
		}
	}
	read := func(t *testing.T, ctrl, dir, file string) int64 {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, root, dir, file))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return unlimited
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		// cgroup v1 writes "no memory limit" as the page-rounded maximum.
		if file == "memory.limit_in_bytes" && v >= 1<<62 {
			return unlimited
		}
		return v
	}
	running := func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}
	for name, w := range cases {
		t.Run(string(w.qos), func(t *testing.T) {
			s.t = t
			p := s.WaitPod("default", name, "running", running)
			if p.Status.QOSClass != w.qos {
				t.Errorf("QoS class %s, want %s", p.Status.QOSClass, w.qos)
			}
			if got := read(t, "cpu", w.dir, "cpu.shares"); got != w.shares {
				t.Errorf("%s cpu.shares = %d, want %d", w.dir, got, w.shares)
			}
			if got := read(t, "cpu", w.dir, "cpu.cfs_quota_us"); got != w.quota {
				t.Errorf("%s cpu.cfs_quota_us = %d, want %d", w.dir, got, w.quota)
			}
			if got := read(t, "memory", w.dir, "memory.limit_in_bytes"); got != w.mem {
				t.Errorf("%s memory.limit_in_bytes = %d, want %d", w.dir, got, w.mem)
			}
			if got := read(t, "pids", w.dir, "pids.max"); got != pidsLimit {
				t.Errorf("%s pids.max = %d, want %d", w.dir, got, pidsLimit)
			}
			// Docker 20.10 on cgroup v1 shares the host's cgroup namespace,
			// so the container sees its full path: inside the pod cgroup.
			self := s.execIn(p, "main", "cat", "/proc/self/cgroup")
			if !strings.Contains(self, ":memory:"+root+w.dir+"/") {
				t.Errorf("container's cgroups are not below %s%s:\n%s", root, w.dir, self)
			}
		})
	}
	s.t = t
	if got := read(t, "cpu", "/kubepods/burstable", "cpu.shares"); got != 102 {
		t.Errorf("burstable QoS cpu.shares = %d, want 102 (the Burstable pod's 100m)", got)
	}
	if got := read(t, "cpu", "/kubepods/besteffort", "cpu.shares"); got != 2 {
		t.Errorf("besteffort QoS cpu.shares = %d, want 2", got)
	}
	if got, want := read(t, "memory", "/kubepods", "memory.limit_in_bytes"), machineMemory(t)&^4095; got != want {
		t.Errorf("kubepods memory.limit_in_bytes = %d, want the machine's %d (nothing reserved, page-rounded)", got, want)
	}

	for name := range cases {
		s.deletePod(name)
	}
	for _, w := range cases {
		for _, ctrl := range []string{"cpu", "memory", "pids"} {
			dir := filepath.Join("/sys/fs/cgroup", ctrl, root, w.dir)
			s.Eventually(dir+" removed", 2*time.Minute, func() (bool, string) {
				_, err := os.Stat(dir)
				return os.IsNotExist(err), "still there"
			})
		}
	}
}
