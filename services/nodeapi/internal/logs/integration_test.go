package logs_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	criapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/shim"
	"github.com/microlet/microlet/services/nodeapi/internal/logs"
	"github.com/microlet/microlet/services/nodeapi/internal/pods"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// patience bounds every wait on Docker; nothing is timed.
const patience = 3 * time.Minute

// countingRuntime is the real CRI client, counting ContainerStatus calls
// per container so the test knows when the log reader is waiting.
type countingRuntime struct {
	criapi.RuntimeService
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingRuntime) ContainerStatus(ctx context.Context, id string, verbose bool) (*runtimeapi.ContainerStatusResponse, error) {
	c.mu.Lock()
	c.calls[id]++
	c.mu.Unlock()
	return c.RuntimeService.ContainerStatus(ctx, id, verbose)
}

func (c *countingRuntime) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[id]
}

// podStore is the pods.Getter of one pod whose status the test sets as
// the kubelet's status manager would.
type podStore struct {
	mu  sync.Mutex
	pod *corev1.Pod
}

func (s *podStore) Get(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pod.Namespace != namespace || s.pod.Name != name {
		return nil, fmt.Errorf("%w: %s/%s", pods.ErrNotFound, namespace, name)
	}
	return s.pod.DeepCopy(), nil
}

func (s *podStore) setStatus(cs corev1.ContainerStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
}

// logLine is one parsed line of a CRI log file.
type logLine struct {
	ts     time.Time
	stream string
	text   string
}

// readCRIFile reads a CRI log file whose lines are all full (F) lines,
// which is what short lines through Docker give.
func readCRIFile(t *testing.T, path string) []logLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []logLine
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 || f[2] != "F" {
			t.Fatalf("unexpected CRI log line %q", l)
		}
		ts, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, logLine{ts: ts, stream: f[1], text: f[3]})
	}
	return out
}

func texts(lines []logLine) string {
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

func TestWithRuntimeShim(t *testing.T) {
	s := shim.Start(t, "nodeapi-logs")
	ctx, cancel := context.WithTimeout(context.Background(), 2*patience)
	defer cancel()

	uid := types.UID("uid-" + rand.String(8))
	logDir := filepath.Join(t.TempDir(), "default_web_"+string(uid))
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: string(uid)},
		Hostname:     "web",
		LogDirectory: logDir,
		Linux:        &runtimeapi.LinuxPodSandboxConfig{},
	}
	sandbox, err := s.Runtime.RunPodSandbox(ctx, sbConfig, "")
	if err != nil {
		t.Fatal(err)
	}
	start := func(attempt uint32, script string) string {
		t.Helper()
		id, err := s.Runtime.CreateContainer(ctx, sandbox, &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: attempt},
			Image:    &runtimeapi.ImageSpec{Image: s.Busybox},
			Command:  []string{"sh", "-c", script},
			LogPath:  fmt.Sprintf("app/%d.log", attempt),
		}, sbConfig)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Runtime.StartContainer(ctx, id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	waitExited := func(id string) {
		t.Helper()
		testenv.Eventually(t, "container "+id+" exited", patience, func() error {
			st, err := s.Runtime.ContainerStatus(ctx, id, false)
			if err != nil {
				return err
			}
			if st.GetStatus().GetState() != runtimeapi.ContainerState_CONTAINER_EXITED {
				return fmt.Errorf("state %v", st.GetStatus().GetState())
			}
			return nil
		})
	}

	store := &podStore{pod: &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: uid},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: s.Busybox}}},
	}}
	rt := &countingRuntime{RuntimeService: s.Runtime, calls: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle("GET /containerLogs/{namespace}/{pod}/{container}", logs.NewHandler(store, rt))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL + "/containerLogs/default/web/app"
	get := func(t *testing.T, query string) string {
		t.Helper()
		resp, err := http.Get(base + "?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET ?%s: %d %s", query, resp.StatusCode, b)
		}
		return string(b)
	}

	// The first run writes to both streams and exits.
	first := start(0, `for i in 1 2 3 4 5; do echo "first run line $i"; done; echo "first run complains" >&2; echo "first run ends"; exit 1`)
	waitExited(first)
	store.setStatus(corev1.ContainerStatus{Name: "app", ContainerID: "docker://" + first,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, ContainerID: "docker://" + first}}})
	firstLines := readCRIFile(t, filepath.Join(logDir, "app", "0.log"))
	if len(firstLines) != 7 {
		t.Fatalf("first run's log has %d lines: %v", len(firstLines), firstLines)
	}
	// Docker copies the two streams separately; their interleaving is the
	// file's, so expectations come from the file.
	wantFirst := texts(firstLines)

	t.Run("content", func(t *testing.T) {
		body := get(t, "")
		if body != wantFirst {
			t.Fatalf("body %q, want the file's lines %q", body, wantFirst)
		}
		var stdout []string
		for _, l := range firstLines {
			if l.stream == "stdout" {
				stdout = append(stdout, l.text)
			} else if l.text != "first run complains" {
				t.Errorf("stderr line %q", l.text)
			}
		}
		want := "first run line 1,first run line 2,first run line 3,first run line 4,first run line 5,first run ends"
		if strings.Join(stdout, ",") != want {
			t.Errorf("stdout lines %q, want %q", stdout, want)
		}
	})
	t.Run("tail", func(t *testing.T) {
		if body, want := get(t, "tailLines=2"), texts(firstLines[5:]); body != want {
			t.Errorf("tailLines=2: %q, want %q", body, want)
		}
		if body, want := get(t, "tail=3"), texts(firstLines[4:]); body != want {
			t.Errorf("tail=3: %q, want %q", body, want)
		}
	})
	t.Run("timestamps", func(t *testing.T) {
		var want strings.Builder
		for _, l := range firstLines {
			want.WriteString(l.ts.UTC().Format("2006-01-02T15:04:05.000000000Z07:00") + " " + l.text + "\n")
		}
		if body := get(t, "timestamps=true"); body != want.String() {
			t.Errorf("body %q, want %q", body, want.String())
		}
	})
	t.Run("sinceTime", func(t *testing.T) {
		since := firstLines[3].ts
		var want []logLine
		for _, l := range firstLines {
			if !l.ts.Before(since) {
				want = append(want, l)
			}
		}
		q := url.Values{"sinceTime": {since.Format(time.RFC3339Nano)}}.Encode()
		if body := get(t, q); body != texts(want) {
			t.Errorf("body %q, want %q", body, texts(want))
		}
	})
	t.Run("limitBytes", func(t *testing.T) {
		if body := get(t, "limitBytes=20"); body != wantFirst[:20] {
			t.Errorf("body %q, want %q", body, wantFirst[:20])
		}
	})
	t.Run("previous of a container that never restarted", func(t *testing.T) {
		resp, err := http.Get(base + "?previous=true")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if want := `previous terminated container "app" in pod "web" not found`; resp.StatusCode != http.StatusBadRequest || string(b) != want {
			t.Errorf("got %d %q, want 400 %q", resp.StatusCode, b, want)
		}
	})

	// The restart: the second run logs, waits for the test to rotate its
	// log, logs again and runs until stopped (the exec that says "rotated"
	// must not race with the container's exit).
	second := start(1, `trap 'exit 0' TERM; echo "second run line 1"; echo "second run line 2"; `+
		`while [ ! -e /tmp/rotated ]; do sleep 0.1; done; echo "after rotation 1"; echo "after rotation 2"; `+
		`while :; do sleep 0.1; done`)
	store.setStatus(corev1.ContainerStatus{Name: "app", ContainerID: "docker://" + second, RestartCount: 1,
		State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, ContainerID: "docker://" + first}}})

	t.Run("follow across rotation until exit", func(t *testing.T) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"?follow=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		r := bufio.NewReader(resp.Body)
		expect := func(want string) {
			t.Helper()
			got, err := r.ReadString('\n')
			if err != nil || got != want+"\n" {
				t.Fatalf("read %q, %v; want %q", got, err, want)
			}
		}
		expect("second run line 1")
		expect("second run line 2")
		// The reader watches the log directory from its first wait on, which
		// starts with its ContainerStatus call (after the handler's own).
		testenv.Eventually(t, "log reader waiting", patience, func() error {
			if n := rt.count(second); n < 2 {
				return fmt.Errorf("%d ContainerStatus calls", n)
			}
			return nil
		})
		// Rotate as the kubelet's container log manager does: rename, then
		// have the runtime reopen the path.
		path := filepath.Join(logDir, "app", "1.log")
		if err := os.Rename(path, path+".20260102-030405"); err != nil {
			t.Fatal(err)
		}
		if err := s.Runtime.ReopenContainerLog(ctx, second); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Runtime.ExecSync(ctx, second, []string{"touch", "/tmp/rotated"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		expect("after rotation 1")
		expect("after rotation 2")
		// The container exits: the stream ends.
		if err := s.Runtime.StopContainer(ctx, second, 30); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(r)
		if err != nil || len(rest) != 0 {
			t.Fatalf("after the last line: %q, %v; want the end of the body", rest, err)
		}
	})

	waitExited(second)
	store.setStatus(corev1.ContainerStatus{Name: "app", ContainerID: "docker://" + second, RestartCount: 1,
		State:                corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ContainerID: "docker://" + second}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, ContainerID: "docker://" + first}}})

	t.Run("current log after rotation", func(t *testing.T) {
		// Like the kubelet, only the live file is read, not rotated ones.
		if body, want := get(t, ""), "after rotation 1\nafter rotation 2\n"; body != want {
			t.Errorf("body %q, want %q", body, want)
		}
	})
	t.Run("previous", func(t *testing.T) {
		if body := get(t, "previous=true"); body != wantFirst {
			t.Errorf("body %q, want the first run's %q", body, wantFirst)
		}
		if body, want := get(t, "previous=true&tailLines=1"), texts(firstLines[6:]); body != want {
			t.Errorf("body %q, want the first run's last line %q", body, want)
		}
	})
}
