package sources

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func runFile(t *testing.T, path string) (*sets, *reports, *clocktesting.FakeClock) {
	t.Helper()
	s, r := newSets(), &reports{}
	clk := clocktesting.NewFakeClock(time.Now())
	f := &File{Path: path, NodeName: "node1", Period: 20 * time.Second, Clock: clk, Report: r,
		Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.Run(ctx, s.sink); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, r, clk
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceFollowsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), podManifest("a", "busybox:1"))
	s, r, _ := runFile(t, dir)
	s.waitFor(t, "a", hasNames("default/a-node1"), nil)

	// create
	write(t, filepath.Join(dir, "b.json"), `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"b"},"spec":{"containers":[{"name":"c","image":"i"}]}}`)
	s.waitFor(t, "a and b", hasNames("default/a-node1", "default/b-node1"), nil)

	// modify in place
	old := s.last()[0].UID
	write(t, filepath.Join(dir, "a.yaml"), podManifest("a", "busybox:2"))
	got := s.waitFor(t, "a with busybox:2", func(p []*corev1.Pod) bool {
		return len(p) == 2 && p[0].Spec.Containers[0].Image == "busybox:2"
	}, nil)
	if got[0].UID == old {
		t.Fatal("a changed spec kept its UID")
	}

	// rename: the pod follows its file (its UID covers the path). The old
	// UID is read before the rename: the new set may arrive at once.
	oldB := s.last()[1].UID
	if err := os.Rename(filepath.Join(dir, "b.json"), filepath.Join(dir, "c.json")); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "b from c.json", func(p []*corev1.Pod) bool {
		return len(p) == 2 && p[1].Name == "b-node1" && p[1].UID != oldB
	}, nil)

	// delete
	if err := os.Remove(filepath.Join(dir, "c.json")); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "only a", hasNames("default/a-node1"), nil)

	// dotfiles, subdirectories and non-regular files are skipped
	write(t, filepath.Join(dir, ".hidden.yaml"), podManifest("hidden", "i"))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sub", "d.yaml"), podManifest("d", "i"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "e.yaml"), podManifest("e", "i"))
	s.waitFor(t, "a and e", hasNames("default/a-node1", "default/e-node1"), nil)
	if r.find("hidden") || r.find("sub") || r.find("fifo") {
		t.Fatalf("skipped paths were reported as errors: %v", r.errs)
	}
}

func TestFileSourceBadAndOversizeFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "good.yaml"), podManifest("good", "i"))
	write(t, filepath.Join(dir, "bad.yaml"), "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers: [{name: c}]\n")
	big := podManifest("big", "i") + "# " + strings.Repeat("x", 10<<20) + "\n"
	write(t, filepath.Join(dir, "big.yaml"), big)
	s, r, _ := runFile(t, dir)
	s.waitFor(t, "good only", hasNames("default/good-node1"), nil)
	r.waitFor(t, "bad.yaml", "spec.containers[0].image")
	r.waitFor(t, "big.yaml", "larger than")

	// Fixing the bad file brings its pod in; the others keep flowing.
	write(t, filepath.Join(dir, "bad.yaml"), podManifest("bad", "i"))
	s.waitFor(t, "good and bad", hasNames("default/good-node1", "default/bad-node1"), nil)
}

func TestFileSourceMissingDirectoryAppearsLater(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	s, r, clk := runFile(t, dir)
	// A missing directory is an empty set: the source is ready.
	s.waitFor(t, "empty set", func(p []*corev1.Pod) bool { return len(p) == 0 }, nil)
	r.waitFor(t, "does not exist")

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.yaml"), podManifest("a", "i"))
	// The retry runs on the injected clock.
	s.waitFor(t, "a", hasNames("default/a-node1"), func() { clk.Step(30 * time.Second) })

	// Once watched, inotify picks up changes without the clock.
	write(t, filepath.Join(dir, "b.yaml"), podManifest("b", "i"))
	s.waitFor(t, "a and b", hasNames("default/a-node1", "default/b-node1"), nil)

	// The directory going away empties the set.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "empty again", func(p []*corev1.Pod) bool { return len(p) == 0 }, func() { clk.Step(30 * time.Second) })
}

func TestFileSourceSingleFileAndRelist(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "only.yaml")
	write(t, path, podManifest("only", "i"))
	s, _, clk := runFile(t, path)
	s.waitFor(t, "only", hasNames("default/only-node1"), nil)
	n := s.count()
	// The periodic relist re-sends the set on the injected clock.
	s.waitFor(t, "a relist", func([]*corev1.Pod) bool { return s.count() > n }, func() { clk.Step(20 * time.Second) })

	// Replacing the file the way editors do (write aside, rename over it)
	// ends that watch; the source watches the new file and reads it.
	for i, img := range []string{"v2", "v3"} {
		tmp := filepath.Join(dir, ".only.yaml.swp")
		write(t, tmp, podManifest("only", img))
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "image "+img, func(p []*corev1.Pod) bool {
			return len(p) == 1 && p[0].Spec.Containers[0].Image == img
		}, func() { clk.Step(time.Duration(i+1) * time.Second) })
	}
}

// A manifest deleted and written back at once (same content, same UID)
// must reach the node as a removal and an addition, the way the kubelet's
// file source shows it, even when the events arrive in one burst; a burst
// of writes to one file still becomes one set.
func TestFileSourceBurstKeepsARemovalAndRecreation(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	write(t, a, podManifest("a", "busybox:1"))
	write(t, b, podManifest("b", "busybox:1"))
	f := &File{Path: dir, NodeName: "node1", Log: slog.New(slog.DiscardHandler), Report: &reports{}, files: map[string]*fileEntry{}}
	s := newSets()
	f.relist(s.sink)
	if !hasNames("default/a-node1", "default/b-node1")(s.last()) {
		t.Fatalf("first set: %s", podNames(s.last()))
	}
	uid := s.last()[1].UID

	// b is removed and written back, then a is written twice: one burst.
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	write(t, b, podManifest("b", "busybox:1"))
	write(t, a, podManifest("a", "busybox:2"))
	events := make(chan fsnotify.Event, 8)
	for _, ev := range []fsnotify.Event{
		{Name: b, Op: fsnotify.Create}, {Name: b, Op: fsnotify.Write},
		{Name: a, Op: fsnotify.Write}, {Name: a, Op: fsnotify.Write},
	} {
		events <- ev
	}
	before := s.count()
	broken, closed := f.takeBurst(fsnotify.Event{Name: b, Op: fsnotify.Remove}, events, s.sink)
	if broken || closed {
		t.Fatalf("broken %v, closed %v", broken, closed)
	}
	s.mu.Lock()
	got := s.all[before:]
	s.mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("the burst sent %d sets, want 2 (b removed, then back with a's change)", len(got))
	}
	if !hasNames("default/a-node1")(got[0]) {
		t.Fatalf("set after b's removal: %s", podNames(got[0]))
	}
	if !hasNames("default/a-node1", "default/b-node1")(got[1]) || got[1][1].UID != uid || got[1][0].Spec.Containers[0].Image != "busybox:2" {
		t.Fatalf("set after the burst: %s", podNames(got[1]))
	}
}
