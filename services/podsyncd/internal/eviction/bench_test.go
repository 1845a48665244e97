package eviction

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	corev1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/microlet/microlet/internal/evictionapi"
)

// benchWorld is a node with n pods of one container each, a mix of QoS
// classes and usages, every one with stats in the Summary and an emptyDir
// with a sizeLimit (the Burstable ones an ephemeral-storage limit too), all
// within their local storage limits.
func benchWorld(n int) *world {
	w := newWorld()
	for i := range n {
		var p *corev1.Pod
		switch i % 3 {
		case 0:
			p = podSpec(fmt.Sprintf("be-%03d", i), nil, nil)
		case 1:
			p = podSpec(fmt.Sprintf("bu-%03d", i), rl("memory", "64Mi", "ephemeral-storage", "100Mi"), rl("memory", "256Mi", "ephemeral-storage", "1Gi"))
		default:
			p = podSpec(fmt.Sprintf("gu-%03d", i), rl("cpu", "100m", "memory", "128Mi"), rl("cpu", "100m", "memory", "128Mi"))
		}
		withEmptyDir(p, "", "512Mi")
		w.pods = append(w.pods, p)
		w.use[p.Name] = podUse{memory: fmt.Sprintf("%dMi", 10+i%97), rootfs: fmt.Sprintf("%dMi", i%50), logs: "1Mi", procs: uint64(1 + i%7),
			volumes: map[string]string{"data": fmt.Sprintf("%dMi", i%100)}, ephemeral: fmt.Sprintf("%dMi", 1+i%50+i%100)}
	}
	return w
}

// BenchmarkSynchronize measures one eviction pass over 110 pods (the
// kubelet's default maxPods) with their stats: "calm" finds no threshold
// met; "memory" finds memory.available met, ranks the 110 pods and evicts
// one. Local storage isolation is on, as by default, so every pass also
// checks the 110 pods' limits. The Summary is built once outside the loop:
// the pass itself is measured, not the stats collection.
func BenchmarkSynchronize(b *testing.B) {
	for _, tc := range []struct {
		name            string
		memAvail, memWS string
	}{{"calm", "3Gi", "1Gi"}, {"memory", "50Mi", "4Gi"}} {
		b.Run(tc.name, func(b *testing.B) {
			w := benchWorld(110)
			w.memAvail, w.memWS = tc.memAvail, tc.memWS
			sum, _ := w.summary(context.Background())
			th, err := evictionapi.Parse(evictionapi.Config{Hard: evictionapi.DefaultEvictionHard})
			if err != nil {
				b.Fatal(err)
			}
			evictions := 0
			m := New(Config{Thresholds: th, LocalStorageCapacityIsolation: true}, Deps{
				Summary:    func(context.Context) (*statsapi.Summary, error) { return sum, nil },
				ActivePods: func() []*corev1.Pod { return w.pods },
				Evict:      func(*corev1.Pod, int64, string, bool) { evictions++ },
				Clock:      w.clock,
				Log:        slog.New(slog.DiscardHandler),
			})
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				// As if the stats were new on every pass.
				m.mu.Lock()
				m.lastObservations = nil
				m.mu.Unlock()
				if _, err := m.Synchronize(ctx); err != nil {
					b.Fatal(err)
				}
			}
			if tc.name == "memory" && evictions == 0 {
				b.Fatal("no eviction under memory pressure")
			}
			if tc.name == "calm" && evictions != 0 {
				b.Fatalf("%d evictions of pods within their limits", evictions)
			}
		})
	}
}
