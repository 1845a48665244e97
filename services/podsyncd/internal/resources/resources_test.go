package resources

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/podutil"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func ctr(name string, req, lim corev1.ResourceList) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
}

func podOf(cs ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: corev1.PodSpec{Containers: cs}}
}

func TestCPUConversions(t *testing.T) {
	for _, tc := range []struct {
		milli, shares, quota int64
	}{
		{0, MinShares, 0},
		{1, MinShares, MinQuota},      // 1m: 1 share and 100 µs are below the minimums
		{10, 10, MinQuota},            // 10m: quota 1000 exactly
		{100, 102, 10000},             // 0.1 CPU
		{250, 256, 25000},             // a quarter
		{1000, 1024, 100000},          // one CPU
		{2500, 2560, 250000},          // 2.5 CPUs
		{300000, MaxShares, 3e7},      // 300 CPUs: shares capped
		{256001, MaxShares, 25600100}, // just over the share cap
	} {
		if got := MilliCPUToShares(tc.milli); got != tc.shares {
			t.Errorf("MilliCPUToShares(%d) = %d, want %d", tc.milli, got, tc.shares)
		}
		if got := MilliCPUToQuota(tc.milli, QuotaPeriod); got != tc.quota {
			t.Errorf("MilliCPUToQuota(%d) = %d, want %d", tc.milli, got, tc.quota)
		}
	}
}

func TestQOSClass(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want corev1.PodQOSClass
	}{
		{"nothing set", podOf(ctr("a", nil, nil)), corev1.PodQOSBestEffort},
		{"only other resources", podOf(ctr("a", rl("ephemeral-storage", "1Gi"), nil)), corev1.PodQOSBestEffort},
		{"equal requests and limits", podOf(ctr("a", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), corev1.PodQOSGuaranteed},
		{"limits without the requests the API defaults from them", podOf(ctr("a", nil, rl("cpu", "1", "memory", "1Gi"))), corev1.PodQOSBurstable},
		{"limits with defaulted requests", podOf(ctr("a", rl("cpu", "1", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), corev1.PodQOSGuaranteed},
		{"memory limit missing", podOf(ctr("a", rl("cpu", "1"), rl("cpu", "1"))), corev1.PodQOSBurstable},
		{"request below limit", podOf(ctr("a", rl("cpu", "500m", "memory", "1Gi"), rl("cpu", "1", "memory", "1Gi"))), corev1.PodQOSBurstable},
		{"one container best effort", podOf(ctr("a", nil, rl("cpu", "1", "memory", "1Gi")), ctr("b", nil, nil)), corev1.PodQOSBurstable},
		{"recorded class wins", func() *corev1.Pod {
			p := podOf(ctr("a", nil, nil))
			p.Status.QOSClass = corev1.PodQOSBurstable
			return p
		}(), corev1.PodQOSBurstable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := QOSClass(tc.pod); got != tc.want {
				t.Fatalf("QOSClass = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestOOMScoreAdj(t *testing.T) {
	const capacity = 4000000000 // 4 GB, round for the arithmetic
	always := corev1.ContainerRestartPolicyAlways
	critical := func() *corev1.Pod {
		p := podOf(ctr("a", nil, nil))
		p.Annotations = map[string]string{podsource.SourceAnnotation: podsource.FileSource}
		p.Spec.PriorityClassName = podutil.SystemNodeCritical
		return p
	}()
	sidecarPod := podOf(ctr("big", rl("memory", "2G"), nil), ctr("small", rl("memory", "400M"), nil))
	sidecarPod.Spec.InitContainers = []corev1.Container{ctr("side", rl("memory", "40M"), nil)}
	sidecarPod.Spec.InitContainers[0].RestartPolicy = &always
	podLevel := podOf(ctr("a", rl("memory", "400M"), nil), ctr("b", nil, nil))
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Requests: rl("memory", "1200M")}

	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		c    int // index into Containers, -1 for the first init container
		want int
	}{
		{"best effort", podOf(ctr("a", nil, nil)), 0, BestEffortOOMScoreAdj},
		{"guaranteed", podOf(ctr("a", rl("cpu", "1", "memory", "1G"), rl("cpu", "1", "memory", "1G"))), 0, GuaranteedOOMScoreAdj},
		{"node-critical static pod", critical, 0, GuaranteedOOMScoreAdj},
		{"burstable 10% of memory", podOf(ctr("a", rl("memory", "400M"), nil)), 0, 900},
		{"burstable 50% of memory", podOf(ctr("a", rl("memory", "2G"), rl("memory", "3G"))), 0, 500},
		{"burstable without memory request", podOf(ctr("a", rl("cpu", "100m"), nil)), 0, 999},
		{"burstable above capacity", podOf(ctr("a", rl("memory", "8G"), nil)), 0, 3},
		{"sidecar capped by the smallest regular container", sidecarPod, -1, 900},
		{"regular container next to a sidecar", sidecarPod, 0, 500},
		// (1200M - 400M) / 2 containers = 400M each on top of their own.
		{"pod-level request shared out", podLevel, 0, 800},
		{"pod-level request, container without its own", podLevel, 1, 900},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *corev1.Container
			if tc.c >= 0 {
				c = &tc.pod.Spec.Containers[tc.c]
			} else {
				c = &tc.pod.Spec.InitContainers[0]
			}
			if got := OOMScoreAdj(tc.pod, c, capacity); got != tc.want {
				t.Fatalf("OOMScoreAdj = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestContainerResources(t *testing.T) {
	const capacity = 4000000000
	for _, tc := range []struct {
		name                    string
		pod                     *corev1.Pod
		shares, quota, mem, oom int64
	}{
		{"best effort", podOf(ctr("a", nil, nil)), MinShares, 0, 0, 1000},
		{"request only", podOf(ctr("a", rl("cpu", "250m", "memory", "400M"), nil)), 256, 0, 0, 900},
		{"limit only: shares from the limit", podOf(ctr("a", nil, rl("cpu", "500m", "memory", "128Mi"))), 512, 50000, 128 << 20, 999},
		{"guaranteed", podOf(ctr("a", rl("cpu", "500m", "memory", "128Mi"), rl("cpu", "500m", "memory", "128Mi"))), 512, 50000, 128 << 20, -997},
		{"request and limit", podOf(ctr("a", rl("cpu", "100m"), rl("cpu", "2", "memory", "1G"))), 102, 200000, 1000000000, 999},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Container(tc.pod, &tc.pod.Spec.Containers[0], capacity)
			if r.CpuShares != tc.shares || r.CpuQuota != tc.quota || r.CpuPeriod != QuotaPeriod || r.MemoryLimitInBytes != tc.mem || r.OomScoreAdj != tc.oom {
				t.Fatalf("got shares=%d quota=%d period=%d mem=%d oom=%d, want %d %d %d %d %d",
					r.CpuShares, r.CpuQuota, r.CpuPeriod, r.MemoryLimitInBytes, r.OomScoreAdj, tc.shares, tc.quota, QuotaPeriod, tc.mem, tc.oom)
			}
		})
	}
	t.Run("pod-level limits fill unset container limits", func(t *testing.T) {
		p := podOf(ctr("a", rl("cpu", "100m", "memory", "64Mi"), nil))
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: rl("cpu", "1", "memory", "256Mi")}
		r := Container(p, &p.Spec.Containers[0], capacity)
		if r.CpuQuota != 100000 || r.MemoryLimitInBytes != 256<<20 {
			t.Fatalf("quota=%d mem=%d, want the pod-level limits", r.CpuQuota, r.MemoryLimitInBytes)
		}
	})
}

func TestPodMemoryLimit(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	withInit := podOf(ctr("a", nil, rl("memory", "100Mi")), ctr("b", nil, rl("memory", "50Mi")))
	withInit.Spec.InitContainers = []corev1.Container{ctr("init", nil, rl("memory", "500Mi"))}
	withSidecar := podOf(ctr("a", nil, rl("memory", "100Mi")))
	withSidecar.Spec.InitContainers = []corev1.Container{ctr("side", nil, rl("memory", "20Mi"))}
	withSidecar.Spec.InitContainers[0].RestartPolicy = &always
	podLevel := podOf(ctr("a", rl("memory", "10Mi"), nil))
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Limits: rl("memory", "300Mi")}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want int64
		ok   bool
	}{
		{"best effort is unbounded", podOf(ctr("a", nil, nil)), 0, false},
		{"one container without a limit", podOf(ctr("a", nil, rl("memory", "100Mi")), ctr("b", rl("cpu", "1"), nil)), 0, false},
		{"sum of the limits", podOf(ctr("a", nil, rl("memory", "100Mi")), ctr("b", rl("memory", "10Mi"), rl("memory", "50Mi"))), 150 << 20, true},
		{"an init container above the sum", withInit, 500 << 20, true},
		{"a sidecar adds to the sum", withSidecar, 120 << 20, true},
		{"pod-level limit", podLevel, 300 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := PodMemoryLimit(tc.pod)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("PodMemoryLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestMemoryCapacity(t *testing.T) {
	if c, err := MemoryCapacity(); err != nil || c <= 0 {
		t.Fatalf("MemoryCapacity of this machine = %d, %v", c, err)
	}
}
