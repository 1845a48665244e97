package eviction

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/microlet/microlet/internal/evictionapi"
	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// withEmptyDir gives pod an emptyDir "data" with the size limit ("" none).
func withEmptyDir(pod *corev1.Pod, medium corev1.StorageMedium, limit string) *corev1.Pod {
	ed := &corev1.EmptyDirVolumeSource{Medium: medium}
	if limit != "" {
		q := resource.MustParse(limit)
		ed.SizeLimit = &q
	}
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: ed}})
	return pod
}

// The vectors follow upstream's localStorageEviction tests and messages
// (pkg/kubelet/eviction eviction_manager.go).
func TestLocalStorageEviction(t *testing.T) {
	tests := []struct {
		name      string
		pod       *corev1.Pod
		use       podUse
		dedicated bool
		wantMsg   string // "" = not evicted
		wantSig   string
	}{
		{name: "emptyDir over its sizeLimit",
			pod:     withEmptyDir(podSpec("a", nil, nil), "", "1Mi"),
			use:     podUse{volumes: map[string]string{"data": "4Mi"}},
			wantMsg: `Usage of EmptyDir volume "data" exceeds the limit "1Mi". `, wantSig: kubeletmetrics.SignalEmptyDirFsLimit},
		{name: "emptyDir at its sizeLimit",
			pod: withEmptyDir(podSpec("a", nil, nil), "", "1Mi"),
			use: podUse{volumes: map[string]string{"data": "1Mi"}}},
		{name: "memory emptyDir over its sizeLimit, as measured",
			pod:     withEmptyDir(podSpec("a", nil, nil), corev1.StorageMediumMemory, "1Mi"),
			use:     podUse{volumes: map[string]string{"data": "2Mi"}},
			wantMsg: `Usage of EmptyDir volume "data" exceeds the limit "1Mi". `, wantSig: kubeletmetrics.SignalEmptyDirFsLimit},
		{name: "emptyDir without sizeLimit",
			pod: withEmptyDir(podSpec("a", nil, nil), "", ""),
			use: podUse{volumes: map[string]string{"data": "40Gi"}}},
		{name: "pod over the sum of its containers' limits",
			pod:     withEmptyDir(podSpec("a", nil, rl("ephemeral-storage", "2Mi")), "", ""),
			use:     podUse{rootfs: "100Ki", logs: "0", volumes: map[string]string{"data": "3Mi"}, ephemeral: "3Mi"},
			wantMsg: "Pod ephemeral local storage usage exceeds the total limit of containers 2Mi. ", wantSig: kubeletmetrics.SignalEphemeralPodFsLimit},
		{name: "emptyDir checked before the pod total",
			pod:     withEmptyDir(podSpec("a", nil, rl("ephemeral-storage", "2Mi")), "", "1Mi"),
			use:     podUse{volumes: map[string]string{"data": "3Mi"}, ephemeral: "3Mi"},
			wantMsg: `Usage of EmptyDir volume "data" exceeds the limit "1Mi". `, wantSig: kubeletmetrics.SignalEmptyDirFsLimit},
		{name: "container writable layer and logs over its limit",
			pod:     podSpec("a", nil, rl("ephemeral-storage", "2Mi")),
			use:     podUse{rootfs: "1536Ki", logs: "1Mi", ephemeral: "1Mi"}, // pod total as if stale: the container check still applies
			wantMsg: `Container a exceeded its local ephemeral storage limit "2Mi". `, wantSig: kubeletmetrics.SignalEphemeralContainerFsLimit},
		{name: "container writable layer not counted with a dedicated image filesystem",
			pod: podSpec("a", nil, rl("ephemeral-storage", "2Mi")), dedicated: true,
			use: podUse{rootfs: "1536Ki", logs: "1Mi", ephemeral: "1Mi"}},
		{name: "within every limit",
			pod: withEmptyDir(podSpec("a", nil, rl("ephemeral-storage", "10Mi")), "", "5Mi"),
			use: podUse{rootfs: "1Mi", logs: "1Ki", volumes: map[string]string{"data": "4Mi"}, ephemeral: "5Mi"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			w.pods = []*corev1.Pod{tc.pod}
			w.use = map[string]podUse{tc.pod.Name: tc.use}
			var got []evicted
			metrics := kubeletmetrics.New()
			m := w.manager(t, Config{LocalStorageCapacityIsolation: true}, &got)
			m.deps.Metrics = metrics
			m.deps.DedicatedImageFs = func(context.Context) (bool, error) { return tc.dedicated, nil }
			pods, err := m.Synchronize(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantMsg == "" {
				if len(got) != 0 || len(pods) != 0 {
					t.Fatalf("evicted %+v", got)
				}
				return
			}
			// At once (the kubelet's 1 s), no DisruptionTarget condition.
			want := evicted{pod: tc.pod.Name, grace: 1, msg: tc.wantMsg}
			if len(got) != 1 || got[0] != want || len(pods) != 1 {
				t.Fatalf("evicted %+v, want %+v", got, want)
			}
			if n := evictionsCounted(t, metrics.Kubelet(), tc.wantSig); n != 1 {
				t.Fatalf("kubelet_evictions{eviction_signal=%q} = %v, want 1", tc.wantSig, n)
			}
		})
	}
}

func evictionsCounted(t *testing.T, reg prometheus.Gatherer, signal string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "kubelet_evictions" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "eviction_signal" && l.GetValue() == signal {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// Local storage evictions come before the thresholds and end the pass:
// every offending pod goes, and no pod is evicted for pressure in the
// same pass. Critical pods are never evicted; pods without stats are
// skipped.
func TestLocalStorageEvictionBeforeThresholds(t *testing.T) {
	w := newWorld()
	w.memAvail, w.memWS = "50Mi", "3Gi" // memory pressure too
	over1 := withEmptyDir(podSpec("over1", nil, nil), "", "1Mi")
	over2 := withEmptyDir(podSpec("over2", nil, nil), "", "1Mi")
	static := withEmptyDir(podSpec("static", nil, nil), "", "1Mi")
	static.Annotations = map[string]string{podsource.SourceAnnotation: podsource.FileSource}
	nostats := withEmptyDir(podSpec("nostats", nil, nil), "", "1Mi")
	hog := podSpec("hog", nil, nil)
	w.pods = []*corev1.Pod{over1, static, nostats, hog, over2}
	big := podUse{memory: "10Mi", volumes: map[string]string{"data": "2Mi"}}
	w.use = map[string]podUse{"over1": big, "over2": big, "static": big, "hog": {memory: "2Gi"}}
	var got []evicted
	m := w.manager(t, Config{Thresholds: mustParse(t, evictionapi.Config{Hard: evictionapi.DefaultEvictionHard}),
		PressureTransitionPeriod: time.Minute, LocalStorageCapacityIsolation: true}, &got)
	pods, err := m.Synchronize(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].pod != "over1" || got[1].pod != "over2" || len(pods) != 2 {
		t.Fatalf("evicted %+v, want over1 and over2 only", got)
	}
	if !m.Pressure().Has(corev1.NodeMemoryPressure) {
		t.Fatal("the pass judged no memory pressure")
	}
	// The next pass acts on the threshold.
	w.clock.Step(DefaultMonitoringPeriod)
	w.pods = []*corev1.Pod{static, hog} // (a pod without stats would rank first for memory)
	if _, err := m.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].pod != "hog" || !got[2].condition {
		t.Fatalf("evicted %+v, want hog for memory with a DisruptionTarget condition", got)
	}
}

// Without thresholds, local storage limits are still enforced (the
// kubelet's manager runs for either); with neither, a pass does nothing.
func TestLocalStorageWithoutThresholds(t *testing.T) {
	w := newWorld()
	w.pods = []*corev1.Pod{withEmptyDir(podSpec("a", nil, nil), "", "1Mi")}
	w.use = map[string]podUse{"a": {volumes: map[string]string{"data": "2Mi"}}}
	var got []evicted
	off := w.manager(t, Config{}, &got)
	if _, err := off.Synchronize(context.Background()); err != nil || len(got) != 0 {
		t.Fatalf("isolation off: evicted %+v (err %v)", got, err)
	}
	on := w.manager(t, Config{LocalStorageCapacityIsolation: true}, &got)
	if _, err := on.Synchronize(context.Background()); err != nil || len(got) != 1 {
		t.Fatalf("isolation on, no thresholds: evicted %+v (err %v), want a", got, err)
	}
}
