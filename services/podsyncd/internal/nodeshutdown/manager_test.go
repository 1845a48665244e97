package nodeshutdown

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/podutil"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/logind"
	"github.com/microlet/microlet/services/podsyncd/internal/kubeletmetrics"
)

// killer is a narrow stand-in for the sync loop: it records kills and
// lets the test decide when each pod has stopped.
type killer struct {
	mu     sync.Mutex
	pods   []*corev1.Pod
	kills  []string
	graces map[string]int64
	done   map[string]chan struct{}
	killed chan string
}

func newKiller(pods ...*corev1.Pod) *killer {
	return &killer{pods: pods, graces: map[string]int64{}, done: map[string]chan struct{}{}, killed: make(chan string, 16)}
}

func (k *killer) ActivePods() []*corev1.Pod {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*corev1.Pod(nil), k.pods...)
}

func (k *killer) KillPod(pod *corev1.Pod, grace int64) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kills = append(k.kills, pod.Name)
	k.graces[pod.Name] = grace
	ch := make(chan struct{})
	k.done[pod.Name] = ch
	k.killed <- pod.Name
	return ch
}

func (k *killer) stop(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	close(k.done[name])
}

type readyLog struct {
	mu   sync.Mutex
	errs [][]string
}

func (r *readyLog) report(errs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, errs)
}

func (r *readyLog) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) == 0 {
		return nil
	}
	return r.errs[len(r.errs)-1]
}

func recv(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(time.Minute):
		t.Fatal("no pod killed within a minute")
		return ""
	}
}

// TestShutdownOverRealBus runs the manager against a private dbus-daemon
// and the logind stand-in: the drop-in raises logind's delay, the lock is
// taken, PrepareForShutdown(true) kills the groups lowest first (the next
// group only once the previous one stopped), reports NotReady and refuses
// pods, and the lock is released only after the last pod stopped;
// PrepareForShutdown(false) takes a new lock and admits pods again.
func TestShutdownOverRealBus(t *testing.T) {
	bus := logind.StartBus(t)
	dropIn := filepath.Join(t.TempDir(), "logind.conf.d", "99-kubelet.conf")
	ld := logind.Start(t, bus, dropIn, time.Second) // below the 30 s needed

	k := newKiller(pod("critical", podutil.SystemCriticalPriority, nil), pod("normal", 0, ptr.To[int64](5)), pod("batch", -5, nil))
	ready := &readyLog{}
	stateDir := t.TempDir()
	metrics := kubeletmetrics.New()
	m := New(Config{GracePeriod: 30 * time.Second, GracePeriodCriticalPods: 10 * time.Second}, testLog(t),
		WithBusAddress(bus.Address), WithDropIn(dropIn), WithReadyErrors(ready.report), WithState(stateDir, metrics))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, k) }()
	defer func() { cancel(); <-done }()

	lock := ld.WaitLock(t, 1, time.Minute)
	if lock.What != "shutdown" || lock.Mode != "delay" || lock.PID != os.Getpid() {
		t.Fatalf("lock = %+v, want a delay lock on shutdown from this process", lock)
	}
	b, err := os.ReadFile(dropIn)
	if err != nil {
		t.Fatalf("drop-in not written: %v", err)
	}
	if !strings.Contains(string(b), "[Login]\nInhibitDelayMaxSec=30\n") {
		t.Fatalf("drop-in = %q, want [Login] InhibitDelayMaxSec=30", b)
	}
	if ld.Reloads() != 1 || ld.InhibitDelayMax() != 30*time.Second {
		t.Fatalf("reloads %d, InhibitDelayMax %s; want 1 and 30s", ld.Reloads(), ld.InhibitDelayMax())
	}
	if ok, _, _ := m.Admit(); !ok || m.ShuttingDown() {
		t.Fatal("pods refused before any shutdown")
	}
	if start, end := shutdownGauges(t, metrics); start != 0 || end != 0 {
		t.Fatalf("shutdown gauges %v, %v before any shutdown", start, end)
	}

	ld.PrepareForShutdown(t, true)
	// The normal group (priority 0 and below) first, with its 20 s or the
	// pod's own 5 s; the critical group waits for it.
	first := []string{recv(t, k.killed), recv(t, k.killed)}
	if !(first[0] == "normal" && first[1] == "batch" || first[0] == "batch" && first[1] == "normal") {
		t.Fatalf("first kills %v, want normal and batch", first)
	}
	if ok, reason, msg := m.Admit(); ok || reason != "NodeShutdown" || msg != "Pod was rejected as the node is shutting down." {
		t.Fatalf("Admit during shutdown = %v %q %q", ok, reason, msg)
	}
	if got := ready.last(); len(got) != 1 || got[0] != "node is shutting down" {
		t.Fatalf("ready errors = %v, want [node is shutting down]", got)
	}
	k.stop("normal")
	k.stop("batch")
	if got := recv(t, k.killed); got != "critical" {
		t.Fatalf("third kill %q, want critical", got)
	}
	// Nothing was killed early, and the lock is still held while the
	// critical pod has not stopped.
	if lock.IsReleased() {
		t.Fatal("lock released before the critical pod stopped")
	}
	// Under way: the start is recorded (file and gauge), the end is 0.
	st, err := LoadState(filepath.Join(stateDir, StateFile))
	if err != nil || st.StartTime.IsZero() || !st.EndTime.IsZero() {
		t.Fatalf("state during the shutdown = %+v, %v; want a start and no end", st, err)
	}
	if start, end := shutdownGauges(t, metrics); start != float64(st.StartTime.Unix()) || end != 0 {
		t.Fatalf("shutdown gauges %v, %v during the shutdown; want %d, 0", start, end, st.StartTime.Unix())
	}
	k.stop("critical")
	select {
	case <-lock.Released():
	case <-time.After(time.Minute):
		t.Fatal("lock not released after every pod stopped")
	}
	st, err = LoadState(filepath.Join(stateDir, StateFile))
	if err != nil || st.EndTime.Before(st.StartTime) || st.EndTime.IsZero() {
		t.Fatalf("state after the shutdown = %+v, %v; want start and end", st, err)
	}
	if start, end := shutdownGauges(t, metrics); start != float64(st.StartTime.Unix()) || end != float64(st.EndTime.Unix()) {
		t.Fatalf("shutdown gauges %v, %v; want the state's %+v", start, end, st)
	}
	// The node boots again: a new process reads the times back.
	again := kubeletmetrics.New()
	New(Config{GracePeriod: time.Second}, testLog(t), WithState(stateDir, again)).restoreMetrics()
	if start, end := shutdownGauges(t, again); start != float64(st.StartTime.Unix()) || end != float64(st.EndTime.Unix()) {
		t.Fatalf("restored gauges %v, %v; want the state's %+v", start, end, st)
	}
	k.mu.Lock()
	graces := map[string]int64{"normal": k.graces["normal"], "batch": k.graces["batch"], "critical": k.graces["critical"]}
	k.mu.Unlock()
	if graces["normal"] != 5 || graces["batch"] != 20 || graces["critical"] != 10 {
		t.Fatalf("grace periods %v, want normal 5 (its own), batch 20, critical 10", graces)
	}

	// Cancelled: a new lock, pods admitted, Ready errors cleared.
	ld.PrepareForShutdown(t, false)
	ld.WaitLock(t, 2, time.Minute)
	testenv.Eventually(t, "admission after the cancellation", time.Minute, func() error {
		if ok, _, _ := m.Admit(); !ok {
			return errSt("still refusing")
		}
		return nil
	})
	if got := ready.last(); len(got) != 0 {
		t.Fatalf("ready errors after cancel = %v, want none", got)
	}
}

// shutdownGauges reads the graceful shutdown start and end gauges.
func shutdownGauges(t *testing.T, m *kubeletmetrics.Metrics) (start, end float64) {
	t.Helper()
	got, err := testenv.GatherMetrics(m.Kubelet())
	if err != nil {
		t.Fatal(err)
	}
	return got.Sum("kubelet_graceful_shutdown_start_time_seconds", nil), got.Sum("kubelet_graceful_shutdown_end_time_seconds", nil)
}

// TestState: the state file in upstream's JSON, a missing file the zero
// state, a corrupt one an error naming the file.
func TestState(t *testing.T) {
	path := filepath.Join(t.TempDir(), StateFile)
	if st, err := LoadState(path); err != nil || !st.StartTime.IsZero() {
		t.Fatalf("missing file: %+v, %v", st, err)
	}
	want := State{StartTime: time.Unix(1700000000, 0).UTC(), EndTime: time.Unix(1700000030, 0).UTC()}
	if err := StoreState(path, want); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != `{"startTime":"2023-11-14T22:13:20Z","endTime":"2023-11-14T22:13:50Z"}` {
		t.Fatalf("file = %s, %v", b, err)
	}
	if got, err := LoadState(path); err != nil || !got.StartTime.Equal(want.StartTime) || !got.EndTime.Equal(want.EndTime) {
		t.Fatalf("LoadState = %+v, %v; want %+v", got, err, want)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("corrupt file: err %v, want one naming %s", err, path)
	}
}

type errSt string

func (e errSt) Error() string { return string(e) }

// TestCancelKeepsLockAndPods: a cancellation without a shutdown kills
// nothing; the manager takes a new lock and drops the old one.
func TestCancelKeepsLockAndPods(t *testing.T) {
	bus := logind.StartBus(t)
	ld := logind.Start(t, bus, filepath.Join(t.TempDir(), "unused.conf"), time.Hour)
	k := newKiller(pod("a", 0, nil))
	m := New(Config{GracePeriod: 10 * time.Second}, testLog(t), WithBusAddress(bus.Address))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, k) }()
	first := ld.WaitLock(t, 1, time.Minute)
	if ld.Reloads() != 0 {
		t.Fatalf("logind reloaded although its delay (1h) suffices")
	}
	ld.PrepareForShutdown(t, false)
	ld.WaitLock(t, 2, time.Minute)
	select {
	case <-first.Released():
	case <-time.After(time.Minute):
		t.Fatal("the first lock was not released after the second was taken")
	}
	cancel()
	<-done
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.kills) != 0 {
		t.Fatalf("pods killed on a cancellation: %v", k.kills)
	}
	if ok, _, _ := m.Admit(); !ok {
		t.Fatal("pods refused after a cancellation")
	}
}

// TestNoLogind: without a system bus the manager logs one warning, keeps
// retrying with backoff, and arms as soon as logind appears.
func TestNoLogind(t *testing.T) {
	sock := filepath.Join(testenv.ShortDir(t, "nobus"), "bus")
	var buf testenv.LockedBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	k := newKiller()
	m := New(Config{GracePeriod: 10 * time.Second}, log, WithBusAddress("unix:path="+sock),
		WithRetry(wait.Backoff{Duration: 20 * time.Millisecond, Factor: 1.5, Steps: 1 << 30, Cap: 200 * time.Millisecond}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, k) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, "three retries", time.Minute, func() error {
		if n := strings.Count(buf.String(), "logind still unavailable"); n < 3 {
			return errSt("retries so far: " + buf.String())
		}
		return nil
	})
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want exactly one:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "graceful node shutdown unavailable") {
		t.Fatalf("the warning does not say what is lost:\n%s", buf.String())
	}
	bus := logind.StartBusAt(t, sock)
	ld := logind.Start(t, bus, filepath.Join(t.TempDir(), "unused.conf"), time.Hour)
	ld.WaitLock(t, 1, time.Minute)
	if ok, _, _ := m.Admit(); !ok {
		t.Fatal("pods refused")
	}
	if !bytes.Contains([]byte(buf.String()), []byte("graceful node shutdown armed")) {
		// The lock was asked for; the log line follows Watch.
		testenv.Eventually(t, "armed log line", time.Minute, func() error {
			if !strings.Contains(buf.String(), "graceful node shutdown armed") {
				return errSt("not armed yet")
			}
			return nil
		})
	}
}

// testLog collects the manager's log and prints it if the test fails.
func testLog(t *testing.T) *slog.Logger {
	var buf testenv.LockedBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("manager log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
