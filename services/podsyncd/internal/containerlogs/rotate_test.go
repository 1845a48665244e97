package containerlogs

import (
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
	testclock "k8s.io/utils/clock/testing"
)

// fakeRuntime answers the calls the rotator makes for containers whose
// logs are files in a temp dir; ReopenContainerLog creates the file again,
// as a runtime's log writer does. Any other call panics (nil embedded).
type fakeRuntime struct {
	criapi.ContainerManager
	logs    map[string]string // container ID -> log path
	running map[string]bool
	reopens int
}

func (f *fakeRuntime) ListContainers(_ context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error) {
	var out []*runtimeapi.Container
	for id := range f.logs {
		st := runtimeapi.ContainerState_CONTAINER_EXITED
		if f.running[id] {
			st = runtimeapi.ContainerState_CONTAINER_RUNNING
		}
		if want := filter.GetState(); want != nil && want.State != st {
			continue
		}
		out = append(out, &runtimeapi.Container{Id: id, State: st})
	}
	return out, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string, _ bool) (*runtimeapi.ContainerStatusResponse, error) {
	p, ok := f.logs[id]
	if !ok {
		return nil, status.Error(codes.NotFound, "no such container")
	}
	st := runtimeapi.ContainerState_CONTAINER_EXITED
	if f.running[id] {
		st = runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{
		Id: id, LogPath: p, State: st,
		Labels: map[string]string{kubelettypes.KubernetesPodNameLabel: "web", kubelettypes.KubernetesPodNamespaceLabel: "default", kubelettypes.KubernetesContainerNameLabel: "app"},
	}}, nil
}

func (f *fakeRuntime) ReopenContainerLog(_ context.Context, id string) error {
	f.reopens++
	fh, err := os.OpenFile(f.logs[id], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	return fh.Close()
}

func write(t *testing.T, path, line string, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(strings.Repeat(line+"\n", n)); err != nil {
		t.Fatal(err)
	}
}

// TestRotate: a log past MaxSize is renamed with a timestamp and reopened;
// on later rotations the older rotated files are gzipped and the oldest
// removed, leaving at most MaxFiles files; a small log and a stopped
// container's log are left alone. Every kept line is readable, the newest
// rotated file uncompressed, the older ones through gzip.
func TestRotate(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "app", "0.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		t.Fatal(err)
	}
	small, stopped := filepath.Join(dir, "small.log"), filepath.Join(dir, "stopped.log")
	rt := &fakeRuntime{
		logs:    map[string]string{"c1": logPath, "c2": small, "c3": stopped},
		running: map[string]bool{"c1": true, "c2": true},
	}
	clk := testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := NewRotator(rt, Policy{MaxSize: 1000, MaxFiles: 3}, slog.New(slog.DiscardHandler), clk)
	write(t, small, "x", 10)
	write(t, stopped, strings.Repeat("y", 99), 100)
	for round := range 6 {
		write(t, logPath, "round"+string(rune('a'+round))+strings.Repeat("z", 90), 20) // ~2 KB
		if err := r.RotateAll(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.Step(time.Minute)
	}
	if rt.reopens != 6 {
		t.Errorf("%d reopens, want one per round (6)", rt.reopens)
	}
	files, _ := filepath.Glob(logPath + "*")
	slices.Sort(files)
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	// MaxFiles 3: the current file, the newest rotated one (plain, a
	// reader may still be on it) and one older rotated file, compressed.
	want := []string{"0.log", "0.log.20260101-000400.gz", "0.log.20260101-000500"}
	if !slices.Equal(names, want) {
		t.Fatalf("files %v, want %v", names, want)
	}
	read := func(name string) string {
		f, err := os.Open(filepath.Join(dir, "app", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var rd io.Reader = f
		if strings.HasSuffix(name, ".gz") {
			zr, err := gzip.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			rd = zr
		}
		b, err := io.ReadAll(rd)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(want[1]); !strings.HasPrefix(got, "rounde") || strings.Count(got, "\n") != 20 {
		t.Errorf("compressed file holds %d lines starting %.10q, want round e's 20", strings.Count(got, "\n"), got)
	}
	if got := read(want[2]); !strings.HasPrefix(got, "roundf") {
		t.Errorf("newest rotated file starts %.10q, want round f", got)
	}
	if got := read(want[0]); got != "" {
		t.Errorf("current file holds %q, want empty (just reopened)", got)
	}
	for _, p := range []string{small, stopped} {
		if m, _ := filepath.Glob(p + ".*"); len(m) != 0 {
			t.Errorf("%s rotated (%v); too small or not running", p, m)
		}
	}
}

// TestRotateCleansLeftovers: a .tmp of an interrupted compression and a
// plain file whose .gz exists are removed; a missing current file is
// reopened.
func TestRotateCleansLeftovers(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "0.log")
	rt := &fakeRuntime{logs: map[string]string{"c1": logPath}, running: map[string]bool{"c1": true}}
	r := NewRotator(rt, Policy{MaxSize: 10, MaxFiles: 5}, slog.New(slog.DiscardHandler), testclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	for _, name := range []string{"0.log.20251231-000000.tmp", "0.log.20251231-000001", "0.log.20251231-000001.gz"} {
		write(t, filepath.Join(dir, name), "old", 1)
	}
	// The current file is missing: the pass reopens it, finds it small.
	if err := r.RotateAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("current log not reopened: %v", err)
	}
	write(t, logPath, "new line", 5)
	if err := r.RotateAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	slices.Sort(names)
	want := []string{"0.log", "0.log.20251231-000001.gz", "0.log.20260101-000000"}
	if !slices.Equal(names, want) {
		t.Errorf("files %v, want %v", names, want)
	}
}

// TestSymlinks: Link makes the kubelet's name, Remove deletes the log files
// with the link, RemoveDanglingSymlinks only removes links of containers
// that are gone or exited.
func TestSymlinks(t *testing.T) {
	dir, links := t.TempDir(), t.TempDir()
	logPath := filepath.Join(dir, "0.log")
	write(t, logPath, "hello", 1)
	write(t, logPath+".20260101-000000.gz", "old", 1)
	if err := Link(links, "web", "default", "app", "c1abcdef", logPath); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(links, "web_default_app-c1abcdef.log")
	if got, err := os.Readlink(link); err != nil || got != logPath {
		t.Fatalf("link %s -> %q (%v), want %s", link, got, err, logPath)
	}
	if err := Link(links, "web", "default", "app", "c1abcdef", logPath); err != nil {
		t.Errorf("a second Link of the same container: %v", err)
	}
	long := SymlinkPath(links, strings.Repeat("p", 200), "ns", strings.Repeat("c", 100), "id")
	if n := len(filepath.Base(long)); n != 255 {
		t.Errorf("long symlink name is %d characters, want 255", n)
	}
	rt := &fakeRuntime{logs: map[string]string{"c1abcdef": logPath}, running: map[string]bool{}}
	if err := Remove(context.Background(), rt, links, "c1abcdef"); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
		t.Errorf("log files left after Remove: %v", left)
	}
	if _, err := os.Lstat(link); !os.IsNotExist(err) {
		t.Errorf("symlink left after Remove: %v", err)
	}
	if err := Remove(context.Background(), rt, links, "unknown-id"); err != nil {
		t.Errorf("Remove of a container the runtime does not know: %v", err)
	}

	// Dangling links: of a running container (mid-rotation) kept, of an
	// exited one and of an unknown one removed; a live link kept.
	live := filepath.Join(dir, "live.log")
	write(t, live, "x", 1)
	rt = &fakeRuntime{logs: map[string]string{"runningid": filepath.Join(dir, "r.log"), "exitedid": filepath.Join(dir, "e.log"), "liveid": live},
		running: map[string]bool{"runningid": true}}
	for id, target := range map[string]string{"runningid": filepath.Join(dir, "r.log"), "exitedid": filepath.Join(dir, "e.log"), "goneidx": filepath.Join(dir, "g.log"), "liveid": live} {
		if err := os.Symlink(target, SymlinkPath(links, "p", "ns", "c", id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveDanglingSymlinks(context.Background(), rt, links); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(links, "*"))
	var names []string
	for _, l := range left {
		names = append(names, filepath.Base(l))
	}
	slices.Sort(names)
	if want := []string{"p_ns_c-liveid.log", "p_ns_c-runningid.log"}; !slices.Equal(names, want) {
		t.Errorf("links left %v, want %v", names, want)
	}
}
