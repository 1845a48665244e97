package imagegc

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	testclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// fakeCRI is a runtime with images and containers in memory; RemoveImage
// frees the image's size on the fake disk. Other calls panic (nil embedded).
type fakeCRI struct {
	criapi.RuntimeService
	criapi.ImageManagerService
	metrics    *kubeletmetrics.Metrics
	images     map[string]*runtimeapi.Image
	containers []*runtimeapi.Container
	capacity   uint64
	used       uint64
	removed    []string
	failRemove string
	// mounts are the image volumes of containers by container ID.
	mounts map[string][]string
}

// Close resolves the two embedded services' Close.
func (f *fakeCRI) Close(context.Context) error { return nil }

func (f *fakeCRI) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	st := &runtimeapi.ContainerStatus{Id: id}
	for _, ref := range f.mounts[id] {
		st.Mounts = append(st.Mounts, &runtimeapi.Mount{ContainerPath: "/vol", Image: &runtimeapi.ImageSpec{Image: ref}})
	}
	return &runtimeapi.ContainerStatusResponse{Status: st}, nil
}

func (f *fakeCRI) ListImages(context.Context, *runtimeapi.ImageFilter) ([]*runtimeapi.Image, error) {
	var out []*runtimeapi.Image
	for _, im := range f.images {
		out = append(out, im)
	}
	return out, nil
}

func (f *fakeCRI) ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	return f.containers, nil
}

func (f *fakeCRI) RemoveImage(_ context.Context, image *runtimeapi.ImageSpec) error {
	id := image.Image
	if id == f.failRemove {
		return errors.New("read-only file system")
	}
	if im := f.images[id]; im != nil {
		f.used -= im.Size
		delete(f.images, id)
		f.removed = append(f.removed, id)
	}
	return nil
}

func (f *fakeCRI) stats(context.Context) (uint64, uint64, error) {
	return f.capacity, f.capacity - f.used, nil
}

func (f *fakeCRI) add(id string, size uint64, pinned bool) {
	f.images[id] = &runtimeapi.Image{Id: id, Size: size, Pinned: pinned}
	f.used += size
}

func (f *fakeCRI) use(ids ...string) {
	f.containers = nil
	for i, id := range ids {
		f.containers = append(f.containers, &runtimeapi.Container{Id: "c" + string(rune('0'+i)), ImageId: id, State: runtimeapi.ContainerState_CONTAINER_EXITED})
	}
}

const mb = 1 << 20

func newGC(f *fakeCRI, p Policy, clk *testclock.FakeClock, rec record.EventRecorder) *GC {
	f.metrics = kubeletmetrics.New()
	return New(f, f, p, Options{FsStats: f.stats, Clock: clk, Recorder: rec, NodeName: "n1", Log: slog.New(slog.DiscardHandler),
		Metrics: f.metrics})
}

// collected is kubelet_image_garbage_collected_total by reason.
func (f *fakeCRI) collected(t *testing.T) map[string]float64 {
	t.Helper()
	m, err := testenv.GatherMetrics(f.metrics.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	return map[string]float64{
		"age":   m.Sum("kubelet_image_garbage_collected_total", map[string]string{"reason": "age"}),
		"space": m.Sum("kubelet_image_garbage_collected_total", map[string]string{"reason": "space"}),
	}
}

// TestFreeSpaceOrder: over the high threshold, images go least recently
// used first (never used first of all), then first detected, then by ID,
// until usage is at the low threshold; in-use and pinned images and images
// younger than MinAge never go.
func TestFreeSpaceOrder(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fakeCRI{images: map[string]*runtimeapi.Image{}, capacity: 1000 * mb}
	f.used = 500 * mb // not images: 50%
	for _, id := range []string{"old-b", "old-a", "pause", "used-then-idle", "busy"} {
		f.add(id, 40*mb, id == "pause")
	}
	f.use("used-then-idle", "busy")
	g := newGC(f, Policy{HighThresholdPercent: 85, LowThresholdPercent: 60, MinAge: 2 * time.Minute}, clk, nil)
	// First pass at 70%: below high, nothing happens, but records start.
	if res, err := g.GarbageCollect(context.Background()); err != nil || len(res.Removed) != 0 || res.UsagePercent != 70 {
		t.Fatalf("below threshold: %+v, %v", res, err)
	}
	clk.Step(time.Minute)
	f.use("busy") // used-then-idle is now idle, last used a minute ago
	f.add("fresh", 40*mb, false)
	f.used += 130 * mb // something else fills the disk: 74+13 = 87%
	clk.Step(2 * time.Minute)
	res, err := g.GarbageCollect(context.Background())
	// To 60% means freeing 870-600 = 270 MB; the eligible images are
	// old-a, old-b (never used; same detection: by ID) and used-then-idle
	// (used once): 120 MB, short of it, so an event and an error. fresh
	// was first detected by this very pass: younger than MinAge.
	if want := []string{"old-a", "old-b", "used-then-idle"}; !slices.Equal(res.Removed, want) {
		t.Errorf("removed %v, want %v", res.Removed, want)
	}
	if got := f.collected(t); got["space"] != 3 || got["age"] != 0 {
		t.Errorf("kubelet_image_garbage_collected_total = %v, want space 3", got)
	}
	if err == nil || !strings.Contains(err.Error(), "Insufficient free disk space on the node's image filesystem (87% of 1000.0 MiB used). Failed to free sufficient space by deleting unused images (freed 125829120 bytes).") {
		t.Errorf("error %v, want the kubelet's insufficient space message", err)
	}
	for _, id := range []string{"pause", "busy", "fresh"} {
		if f.images[id] == nil {
			t.Errorf("%s removed; it is pinned, in use or too young", id)
		}
	}
}

// TestFreeSpaceStopsAtLowThreshold: removal stops as soon as enough bytes
// are freed, and MinAge spares recently detected images.
func TestFreeSpaceStopsAtLowThreshold(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fakeCRI{images: map[string]*runtimeapi.Image{}, capacity: 100 * mb}
	f.used = 70 * mb
	for _, id := range []string{"a", "b", "c", "d"} {
		f.add(id, 5*mb, false) // 90%
	}
	rec := record.NewFakeRecorder(10)
	g := newGC(f, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: 2 * time.Minute}, clk, rec)
	res, err := g.GarbageCollect(context.Background())
	if len(res.Removed) != 0 || err == nil {
		t.Fatalf("first sight of every image is younger than MinAge: removed %v, err %v", res.Removed, err)
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning FreeDiskSpaceFailed Insufficient free disk space") {
		t.Errorf("event %q", ev)
	}
	clk.Step(2 * time.Minute)
	res, err = g.GarbageCollect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// 90% to 80%: 10 MB, two images of 5 MB.
	if want := []string{"a", "b"}; !slices.Equal(res.Removed, want) {
		t.Errorf("removed %v, want %v", res.Removed, want)
	}
}

// TestMaxAge: once podsyncd has run longer than MaxAge, images unused for
// longer go whatever the disk usage; a failed removal is an error and the
// image stays a candidate.
func TestMaxAge(t *testing.T) {
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f := &fakeCRI{images: map[string]*runtimeapi.Image{}, capacity: 100 * mb}
	f.add("idle", mb, false)
	f.add("recent", mb, false)
	f.add("stuck", mb, false)
	f.failRemove = "stuck"
	f.use("recent")
	g := newGC(f, Policy{HighThresholdPercent: 85, LowThresholdPercent: 80, MinAge: time.Minute, MaxAge: time.Hour}, clk, nil)
	if res, err := g.GarbageCollect(context.Background()); err != nil || len(res.Removed) != 0 {
		t.Fatalf("before MaxAge since start: %+v %v", res, err)
	}
	clk.Step(30 * time.Minute)
	if _, err := g.GarbageCollect(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.use() // recent: last seen in use by the pass 30 min in
	clk.Step(31 * time.Minute)
	res, err := g.GarbageCollect(context.Background())
	if want := []string{"idle"}; !slices.Equal(res.Removed, want) {
		t.Errorf("removed %v, want %v (recent was used 31 min ago)", res.Removed, want)
	}
	if got := f.collected(t); got["age"] != 1 || got["space"] != 0 {
		t.Errorf("kubelet_image_garbage_collected_total = %v, want age 1 (stuck failed: not counted)", got)
	}
	if err == nil || !strings.Contains(err.Error(), "stuck") {
		t.Errorf("error %v, want one naming the image that could not be removed", err)
	}
}

func TestPolicy(t *testing.T) {
	if errs := Default().Validate(); len(errs) > 0 {
		t.Errorf("default: %v", errs)
	}
	for _, p := range []Policy{
		{HighThresholdPercent: 101},
		{HighThresholdPercent: 80, LowThresholdPercent: 85},
		{HighThresholdPercent: 80, LowThresholdPercent: -1},
		{HighThresholdPercent: 80, MinAge: time.Hour, MaxAge: time.Minute},
	} {
		if len(p.Validate()) == 0 {
			t.Errorf("%+v accepted", p)
		}
	}
	if !(Policy{HighThresholdPercent: 100}).Disabled() || (Policy{HighThresholdPercent: 100, MaxAge: time.Hour}).Disabled() {
		t.Error("Disabled is high threshold 100 without MaxAge")
	}
	if got := formatSize(1536 * mb); got != "1.5 GiB" {
		t.Errorf("formatSize = %q", got)
	}
}

// TestInvalidCapacity: a zero capacity is an InvalidDiskCapacity event.
func TestInvalidCapacity(t *testing.T) {
	f := &fakeCRI{images: map[string]*runtimeapi.Image{}}
	rec := record.NewFakeRecorder(1)
	g := newGC(f, DefaultPolicy(), testclock.NewFakeClock(time.Now()), rec)
	if _, err := g.GarbageCollect(context.Background()); err == nil {
		t.Fatal("no error")
	}
	if ev := <-rec.Events; ev != "Warning InvalidDiskCapacity invalid capacity 0 on image filesystem" {
		t.Errorf("event %q", ev)
	}
}

// TestImageVolumesInUse: an image a container mounts as an image volume
// (by ID or by a tag of the image) is in use, like the container's own.
func TestImageVolumesInUse(t *testing.T) {
	f := &fakeCRI{images: map[string]*runtimeapi.Image{}, capacity: 100 * mb}
	for _, id := range []string{"run", "vol-by-id", "vol-by-tag", "unused"} {
		f.add(id, 10*mb, false)
	}
	f.images["vol-by-tag"].RepoTags = []string{"reg.io/data:1"}
	f.use("run")
	f.mounts = map[string][]string{"c0": {"vol-by-id", "reg.io/data:1"}}
	clk := testclock.NewFakeClock(time.Now())
	g := newGC(f, Policy{HighThresholdPercent: 1, LowThresholdPercent: 0}, clk, nil)
	var after []string
	g.opts.AfterPass = func(ids []string, _ time.Time) { after = ids }
	if _, err := g.GarbageCollect(context.Background()); err == nil {
		t.Error("freeing down to 0% with images in use should fall short")
	}
	if !slices.Equal(f.removed, []string{"unused"}) {
		t.Errorf("removed %v, want only the unused image", f.removed)
	}
	slices.Sort(after)
	if want := []string{"run", "vol-by-id", "vol-by-tag"}; !slices.Equal(after, want) {
		t.Errorf("AfterPass got %v, want the images left %v", after, want)
	}
}
