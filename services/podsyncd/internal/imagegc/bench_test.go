package imagegc

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"
)

// BenchmarkPass110Pods is one image GC pass on a node with 110 pods of 3
// containers (330 running, 330 dead) and 200 images, 100 of them unused,
// below the high threshold: the records, the order and the threshold
// check, without the CRI round trips.
func BenchmarkPass110Pods(b *testing.B) {
	f := &fakeCRI{images: map[string]*runtimeapi.Image{}, capacity: 100 << 30}
	var used []string
	for i := range 200 {
		id := fmt.Sprintf("sha256:%064d", i)
		f.add(id, 50<<20, i == 0)
		if i < 100 {
			used = append(used, id)
		}
	}
	for i := range 660 {
		f.containers = append(f.containers, &runtimeapi.Container{Id: fmt.Sprint(i), ImageId: used[i%len(used)]})
	}
	g := New(f, f, DefaultPolicy(), Options{FsStats: f.stats, Clock: testclock.NewFakeClock(time.Now()), Log: slog.New(slog.DiscardHandler)})
	b.ReportAllocs()
	for b.Loop() {
		res, err := g.GarbageCollect(context.Background())
		if err != nil || len(res.Removed) != 0 {
			b.Fatalf("%+v %v", res, err)
		}
	}
}
