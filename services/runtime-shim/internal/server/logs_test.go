package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/crilog"
	"github.com/microlet/microlet/services/runtime-shim/internal/shimtest"
)

// The log writer: n numbered lines of ~110 bytes on stdout and on stderr at
// once, as fast as awk writes them, then on stdout a 40000-byte line (Docker
// and the CRI split it into partial lines) and "tail" without a newline.
const (
	logPad       = 100
	longLine     = 40000
	logTail      = "tail"
	logLines     = 240000 // ~25 MiB a stream, 50 MiB in all: several of Docker's 10 MB rotations
	logWriterCmd = `gen() { awk -v n=$N -v s=$1 'BEGIN{p=sprintf("%0` + "100" + `d",0); for(i=1;i<=n;i++) printf "%s %d %s\n", s, i, p}'; }
gen out & gen err >&2; wait
awk 'BEGIN{printf "%0` + "40000" + `d\n", 0; printf "tail"}'`
)

// logPod runs a sandbox with the log writer and returns the container ID
// and the CRI log path.
func logPod(t testing.TB, ctx context.Context, sh *shimtest.Shim, env *shimtest.Env, name string, n int) (string, string) {
	image := env.Registry.Image(registry.Busybox)
	if _, err := sh.Image.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}); err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	pc := podConfig(name, logDir)
	sb, err := sh.Runtime.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: pc})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sh.Runtime.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, SandboxConfig: pc,
		Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "w"}, Image: &runtimeapi.ImageSpec{Image: image},
			Command: []string{"sh", "-c", logWriterCmd}, Envs: []*runtimeapi.KeyValue{{Key: "N", Value: []byte(strconv.Itoa(n))}},
			LogPath: "w/0.log"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Runtime.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: c.ContainerId}); err != nil {
		t.Fatal(err)
	}
	return c.ContainerId, filepath.Join(logDir, "w/0.log")
}

// criEntry is a CRI log line joined with the partial lines before it.
type criEntry struct {
	content string
	partial bool // the last piece was P: the output ended without a newline
}

// readCRI reads the CRI log at path with its rotated files (path.1, path.2,
// ..., oldest last) into the entries of each stream.
func readCRI(t testing.TB, path string) map[string][]criEntry {
	t.Helper()
	names := []string{path}
	for i := 1; ; i++ {
		name := path + "." + strconv.Itoa(i)
		if _, err := os.Stat(name); err != nil {
			break
		}
		names = append(names, name)
	}
	slices.Reverse(names)
	out := map[string][]criEntry{}
	pending := map[string]*strings.Builder{}
	for _, name := range names {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			_, stream, tag, content, err := crilog.ParseLine(sc.Bytes())
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if pending[stream] == nil {
				pending[stream] = &strings.Builder{}
			}
			pending[stream].Write(content)
			if tag == crilog.TagFull {
				out[stream] = append(out[stream], criEntry{content: pending[stream].String()})
				pending[stream].Reset()
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	for stream, b := range pending {
		if b.Len() > 0 {
			out[stream] = append(out[stream], criEntry{content: b.String(), partial: true})
		}
	}
	return out
}

// logComplete reports whether the writer's last line of each stream is in
// the CRI log at path (the streams end in either order).
func logComplete(path string, n int) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte(" stdout P "+logTail+"\n")) &&
		bytes.Contains(b, []byte(fmt.Sprintf(" stderr F err %d %s\n", n, strings.Repeat("0", logPad))))
}

// waitLog waits until the container exited and both streams' last lines
// are copied.
func waitLog(t testing.TB, ctx context.Context, sh *shimtest.Shim, id, path string, n int) {
	t.Helper()
	var size int64 = -1
	testenv.EventuallyEvery(t, "log of "+id+" complete", untilDone(ctx), 200*time.Millisecond, func() error {
		st, err := sh.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			return err
		}
		if st.Status.State != runtimeapi.ContainerState_CONTAINER_EXITED {
			return fmt.Errorf("container %v", st.Status.State)
		}
		if sz := fileSize(path); sz != size {
			size = sz
			if logComplete(path, n) {
				return nil
			}
		}
		return fmt.Errorf("%d bytes, not every line yet", size)
	})
}

// untilDone is the time left before ctx's deadline.
func untilDone(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return 10 * time.Minute
	}
	return time.Until(d)
}

// checkLog checks every line the writer wrote is in the log exactly once,
// in order, each stream on its own, with the long line split as partials.
func checkLog(t testing.TB, path string, n int) {
	t.Helper()
	got := readCRI(t, path)
	pad := strings.Repeat("0", logPad)
	for stream, prefix := range map[string]string{crilog.Stdout: "out", crilog.Stderr: "err"} {
		want := make([]criEntry, 0, n+2)
		for i := 1; i <= n; i++ {
			want = append(want, criEntry{content: fmt.Sprintf("%s %d %s", prefix, i, pad)})
		}
		if stream == crilog.Stdout {
			want = append(want, criEntry{content: strings.Repeat("0", longLine)}, criEntry{content: logTail, partial: true})
		}
		g := got[stream]
		if len(g) != len(want) {
			t.Errorf("%s: %d lines, want %d", stream, len(g), len(want))
		}
		for i := range min(len(g), len(want)) {
			if g[i] != want[i] {
				t.Fatalf("%s line %d: %.60q (partial %v), want %.60q", stream, i, g[i].content, g[i].partial, want[i].content)
			}
		}
	}
}

// TestLogCopyExact: a fast writer well past Docker's rotation size; the
// CRI log holds each line once, in order, per stream.
func TestLogCopyExact(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, 10*time.Minute)
	id, path := logPod(t, ctx, sh, env, "logexact", logLines)
	waitLog(t, ctx, sh, id, path, logLines)
	checkLog(t, path, logLines)
}

// TestLogCopyShimKilled kills the shim (SIGKILL) while the writer runs and
// starts another on the same data dir: it resumes where the first stopped.
// What the container writes while no shim copies only Docker keeps, so
// Docker keeps 20 files of 10 MB here, more than the writer's whole output
// in json (~80 MB): it still rotates about eight times, with the copier
// stopped across some of them.
func TestLogCopyShimKilled(t *testing.T) {
	env := shimtest.Get(t)
	retain := []string{"--docker-log-max-size=10m", "--docker-log-max-files=20"}
	sh := env.StartShim(t, retain...)
	ctx := ctxT(t, 10*time.Minute)
	id, path := logPod(t, ctx, sh, env, "logkill", logLines)
	waitSize(t, ctx, path, 5<<20)
	sh.Kill()
	killed := fileSize(path)
	// Docker writes on while no shim copies: the next shim starts only
	// once Docker's own json log has taken another MiB (or the writer is
	// done), so there is output that only Docker holds to resume from.
	ins, err := env.Docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dockerLog := ins.Container.LogPath
	st0, err := os.Stat(dockerLog)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "Docker's log a MiB further (or rotated) while no shim copies", untilDone(ctx), func() error {
		st, err := os.Stat(dockerLog)
		switch {
		case err != nil:
			return err
		case !os.SameFile(st0, st) || st.Size() >= st0.Size()+1<<20:
			return nil
		}
		ins, err := env.Docker.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err == nil && !ins.Container.State.Running {
			return nil
		}
		return fmt.Errorf("%d bytes, was %d", st.Size(), st0.Size())
	})
	t.Logf("CRI log %d bytes when the shim was killed, %d when the next one starts", killed, fileSize(path))
	sh2 := env.StartShim(t, append(retain, "--data-dir="+sh.DataDir)...)
	waitLog(t, ctx, sh2, id, path, logLines)
	t.Logf("CRI log %d bytes at the end", fileSize(path))
	checkLog(t, path, logLines)
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}

// TestLogCopyReopen rotates the CRI log as the kubelet does (rename, then
// ReopenContainerLog) several times while the writer runs.
func TestLogCopyReopen(t *testing.T) {
	env := shimtest.Get(t)
	sh := env.StartShim(t)
	ctx := ctxT(t, 10*time.Minute)
	id, path := logPod(t, ctx, sh, env, "logreopen", logLines)
	for i := 1; i <= 3; i++ {
		waitSize(t, ctx, path, 4<<20)
		for j := i - 1; j >= 1; j-- {
			if err := os.Rename(path+"."+strconv.Itoa(j), path+"."+strconv.Itoa(j+1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		if _, err := sh.Runtime.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
			t.Fatal(err)
		}
	}
	waitLog(t, ctx, sh, id, path, logLines)
	checkLog(t, path, logLines)
}

// waitSize waits until the file at path holds at least size bytes.
func waitSize(t testing.TB, ctx context.Context, path string, size int64) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("%s at %d bytes", path, size), untilDone(ctx), func() error {
		st, err := os.Stat(path)
		if err == nil && st.Size() < size {
			err = fmt.Errorf("%d bytes", st.Size())
		}
		return err
	})
}

var benchPods int // BenchmarkLogCopy runs more than once: pod names differ

// BenchmarkLogCopy runs the writer once per iteration and reports the MB/s
// of container output that reached the CRI log (Docker's json-file writes
// included: that is the path a container's output takes).
func BenchmarkLogCopy(b *testing.B) {
	env := shimtest.Get(b)
	sh := env.StartShim(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const n = 100000
	var total int64
	var elapsed time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		benchPods++
		id, path := logPod(b, ctx, sh, env, fmt.Sprintf("logbench%d", benchPods), n)
		waitLog(b, ctx, sh, id, path, n)
		elapsed += time.Since(start)
		for _, es := range readCRI(b, path) {
			for _, e := range es {
				total += int64(len(e.content) + 1)
			}
		}
	}
	b.ReportMetric(float64(total)/1e6/elapsed.Seconds(), "MB/s")
}
