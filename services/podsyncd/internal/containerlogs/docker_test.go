package containerlogs_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	crilogs "k8s.io/cri-client/pkg/logs"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/shim"
	"github.com/microlet/microlet/services/podsyncd/internal/containerlogs"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// follower collects the numbered lines a log reader writes and notes the
// first gap or repeat.
type follower struct {
	mu      sync.Mutex
	partial []byte
	last    int
	err     error
}

func (f *follower) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partial = append(f.partial, p...)
	for {
		i := bytes.IndexByte(f.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(f.partial[:i])
		f.partial = f.partial[i+1:]
		n := lineNumber(line)
		if n != f.last+1 && f.err == nil {
			f.err = fmt.Errorf("line %d followed line %d (%q)", n, f.last, line)
		}
		f.last = n
	}
}

func (f *follower) seen() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last, f.err
}

// lineNumber is N of "line N ...", -1 for anything else.
func lineNumber(s string) int {
	f := strings.Fields(s)
	if len(f) < 2 || f[0] != "line" {
		return -1
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return n
}

// numbersIn reads a CRI log file (gzipped when it ends in .gz) and returns
// the line numbers in it.
func numbersIn(t *testing.T, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	var out []int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// <time> <stream> <tag> <text>
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) == 4 {
			out = append(out, lineNumber(parts[3]))
		}
	}
	return out
}

// TestRotationOnDocker: a container on runtime-shim writes batches of
// numbered lines (each batch more than the size limit); after each batch a
// rotation pass renames the log and runtime-shim reopens it through
// ReopenContainerLog. A reader following the log from the start (the
// kubelet's reader, cri-client's ReadLogs, what `kubectl logs -f` gets)
// sees every line once, in order, across every rotation; at the end the
// container has at most MaxFiles files, the rotated ones each one batch,
// the older ones gzipped, and together they hold the newest lines without
// a gap; a plain read of the log gives the lines since the last rotation.
func TestRotationOnDocker(t *testing.T) {
	s := shim.Start(t, "logrotate")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cc, err := grpcclient.Dial("unix://" + s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	rt := runtimeapi.NewRuntimeServiceClient(cc)

	uid := "rot-" + rand.String(6)
	logDir := filepath.Join(s.Dir, "pods", "default_writer_"+uid)
	sb, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "writer", Namespace: "default", Uid: uid},
		LogDirectory: logDir, Linux: &runtimeapi.LinuxPodSandboxConfig{},
	}})
	if err != nil {
		t.Fatal(err)
	}
	created, err := rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"}, Image: &runtimeapi.ImageSpec{Image: s.Busybox},
		Command: []string{"sleep", "3600"}, LogPath: "app/0.log",
	}, SandboxConfig: &runtimeapi.PodSandboxConfig{LogDirectory: logDir}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.ContainerId
	if _, err := rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(logDir, "app", "0.log")
	testenv.Eventually(t, "the CRI log file", time.Minute, func() error { _, err := os.Stat(logPath); return err })

	fol := &follower{}
	readCtx, stopReading := context.WithCancel(ctx)
	readDone := make(chan error, 1)
	go func() {
		opts := &crilogs.LogOptions{Follow: true}
		readDone <- crilogs.ReadLogs(readCtx, logPath, id, opts, s.Runtime, fol, fol)
	}()

	const (
		maxSize  = 16 << 10
		maxFiles = 3
		batch    = 130 // lines of ~140 bytes in the CRI format: ~18 KB, just past maxSize
		batches  = 6
	)
	r := containerlogs.NewRotator(s.Runtime, containerlogs.Policy{MaxSize: maxSize, MaxFiles: maxFiles}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	pad := strings.Repeat("x", 90)
	for b := range batches {
		first, last := b*batch+1, (b+1)*batch
		// Written to the stdout of the container's process (sleep; PID
		// 1 is the sandbox's pause in the pod's shared PID namespace), so
		// it goes through Docker and runtime-shim's copier like any output.
		script := fmt.Sprintf("for i in $(seq %d %d); do echo \"line $i %s\"; done > /proc/$(pidof sleep)/fd/1", first, last, pad)
		ex, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", script}, Timeout: 60})
		if err != nil || ex.ExitCode != 0 {
			t.Fatalf("exec: %v %+v", err, ex)
		}
		testenv.Eventually(t, fmt.Sprintf("the follower at line %d", last), time.Minute, func() error {
			select {
			case err := <-readDone:
				t.Fatalf("the follower stopped: %v", err)
			default:
			}
			n, err := fol.seen()
			if err != nil {
				return nil // reported below
			}
			if n < last {
				fi, _ := os.Stat(logPath)
				return fmt.Errorf("at line %d (log file %v)", n, fi.Size())
			}
			return nil
		})
		if _, err := fol.seen(); err != nil {
			t.Fatalf("follower: %v", err)
		}
		// Rotation names files by the second; two rotations in one
		// second would reuse a name.
		rotatedBefore, _ := filepath.Glob(logPath + ".*")
		testenv.Eventually(t, "a new second for the rotated file's name", 3*time.Second, func() error {
			name := logPath + "." + time.Now().Format("20060102-150405")
			if slices.Contains(rotatedBefore, name) || slices.Contains(rotatedBefore, name+".gz") {
				return fmt.Errorf("%s exists", name)
			}
			return nil
		})
		if err := r.RotateAll(ctx); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(logPath); err != nil || fi.Size() != 0 {
			t.Fatalf("after rotation %d the current log is %v, %v; want a new empty file", b, fi, err)
		}
	}
	// One more line lands in the new current file and reaches the reader.
	if _, err := rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", fmt.Sprintf("echo 'line %d end' > /proc/$(pidof sleep)/fd/1", batches*batch+1)}, Timeout: 60}); err != nil {
		t.Fatal(err)
	}
	total := batches*batch + 1
	testenv.Eventually(t, "the follower at the last line", time.Minute, func() error {
		if n, _ := fol.seen(); n < total {
			return fmt.Errorf("at line %d", n)
		}
		return nil
	})
	stopReading()
	<-readDone //nolint:errcheck // it ends with the cancellation ("context cancelled")
	if n, err := fol.seen(); err != nil || n != total {
		t.Errorf("follower: last line %d, err %v; want %d without gaps", n, err, total)
	}

	files, _ := filepath.Glob(logPath + ".*")
	slices.Sort(files) // the timestamps sort oldest first
	files = append(files, logPath)
	if len(files) != maxFiles {
		t.Fatalf("files %v, want %d", files, maxFiles)
	}
	// Oldest first: the gzipped one, the newest rotated one, the current.
	if !strings.HasSuffix(files[0], ".gz") || strings.HasSuffix(files[1], ".gz") || files[2] != logPath {
		t.Errorf("files %v: want an older .gz, a plain newest rotated file and the current log", files)
	}
	var all []int
	for _, f := range files[:2] {
		nums := numbersIn(t, f)
		if len(nums) != batch {
			t.Errorf("%s holds %d lines, want one batch (%d)", filepath.Base(f), len(nums), batch)
		}
		fi, _ := os.Stat(f)
		if !strings.HasSuffix(f, ".gz") && fi.Size() > 2*maxSize {
			t.Errorf("%s is %d bytes; one batch past the %d limit is under twice it", filepath.Base(f), fi.Size(), maxSize)
		}
		all = append(all, nums...)
	}
	all = append(all, numbersIn(t, logPath)...)
	for i, n := range all {
		if want := total - len(all) + 1 + i; n != want {
			t.Fatalf("kept files hold line %d at position %d, want %d: the newest lines without a gap", n, i, want)
		}
	}
	// A plain read is the current file, as the kubelet's.
	var plain bytes.Buffer
	if err := crilogs.ReadLogs(ctx, logPath, id, &crilogs.LogOptions{}, s.Runtime, &plain, &plain); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(plain.String()); got != fmt.Sprintf("line %d end", total) {
		t.Errorf("plain read %q, want the line after the last rotation", got)
	}
}
