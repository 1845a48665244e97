package logs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
)

// patience bounds every wait in these tests: a hang fails the test instead
// of the whole run; nothing is timed.
const patience = 2 * time.Minute

// followEnv is a running container "app" of pod default/web whose log the
// test writes while a follow request reads it.
type followEnv struct {
	path string
	rt   *fakeRuntime
	url  string
	// done is closed when the handler's ServeHTTP has returned.
	done chan struct{}
}

func newFollowEnv(t *testing.T, lines ...string) *followEnv {
	t.Helper()
	e := &followEnv{path: filepath.Join(t.TempDir(), "default_web_uid", "app", "0.log"), done: make(chan struct{})}
	writeLog(t, e.path, lines...)
	e.rt = newFakeRuntime(criContainer("app-0", e.path, runtimeapi.ContainerState_CONTAINER_RUNNING))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", ContainerID: "docker://app-0", State: running()},
		}},
	}
	h := NewHandler(fakePods{"default/web": pod}, e.rt, WithLogger(testLogger(t)))
	e.url = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(e.done)
		h.ServeHTTP(w, r)
	})) + "/containerLogs/default/web/app"
	return e
}

// open starts a request and returns once its headers arrived.
func (e *followEnv) open(t *testing.T, ctx context.Context, query string) *bufio.Reader {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no response headers: %v", err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return bufio.NewReader(resp.Body)
}

// expect reads the next line and compares it.
func expect(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	got, err := r.ReadString('\n')
	if err != nil || got != want+"\n" {
		t.Fatalf("read %q, %v; want line %q", got, err, want)
	}
}

// expectEnd reads to the end of the body, which must be clean and empty.
func expectEnd(t *testing.T, r *bufio.Reader) {
	t.Helper()
	rest, err := io.ReadAll(r)
	if err != nil || len(rest) != 0 {
		t.Fatalf("after the last line: %q, %v; want a clean end", rest, err)
	}
}

func TestFollowAcrossRotation(t *testing.T) {
	e := newFollowEnv(t, criLine(0, "stdout", "F", "a1"), criLine(time.Second, "stderr", "F", "a2"))
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	r := e.open(t, ctx, "follow=true")
	expect(t, r, "a1")
	expect(t, r, "a2")
	// The CRI reader notices a new file at the path only through its
	// directory watch, which it sets up at the first end of file and before
	// its first wait, the wait starting with a ContainerStatus call (the
	// handler made one already). A rotation before that goes unseen by the
	// kubelet's reader too; that race is not what this test is about.
	testenv.Eventually(t, "the log reader waiting for changes", patience, func() error {
		if n := e.rt.statusCalls(); n < 2 {
			return fmt.Errorf("%d ContainerStatus calls", n)
		}
		return nil
	})

	// Rotation the way the kubelet's log manager does it: rename, the
	// runtime keeps writing to the renamed file until it reopens the path.
	rotated := e.path + ".20260102-030405"
	if err := os.Rename(e.path, rotated); err != nil {
		t.Fatal(err)
	}
	appendLog(t, rotated, criLine(2*time.Second, "stdout", "F", "a3"))
	expect(t, r, "a3")
	writeLog(t, e.path, criLine(3*time.Second, "stdout", "P", "b"), criLine(3*time.Second, "stdout", "F", "1"))
	expect(t, r, "b1")
	appendLog(t, e.path, criLine(4*time.Second, "stderr", "F", "b2"))
	expect(t, r, "b2")

	// The container exits: the reader drains the file and the body ends.
	appendLog(t, e.path, criLine(5*time.Second, "stdout", "F", "last words"))
	e.rt.setState("app-0", runtimeapi.ContainerState_CONTAINER_EXITED)
	expect(t, r, "last words")
	expectEnd(t, r)
	<-e.done
}

func TestFollowQuietContainer(t *testing.T) {
	e := newFollowEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// open returns only once headers arrived: with nothing logged yet they
	// must be flushed up front, or this blocks until the patience runs out.
	r := e.open(t, ctx, "follow")
	appendLog(t, e.path, criLine(0, "stdout", "F", "hello"))
	expect(t, r, "hello")
	e.rt.setState("app-0", runtimeapi.ContainerState_CONTAINER_EXITED)
	expectEnd(t, r)
}

func TestFollowWithTail(t *testing.T) {
	e := newFollowEnv(t, criLine(0, "stdout", "F", "old"), criLine(time.Second, "stdout", "F", "recent"))
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	// tailLines picks the start; with follow it does not stop the stream.
	r := e.open(t, ctx, "follow=1&tailLines=1&timestamps=true")
	expect(t, r, "2026-01-02T03:04:06.000000000Z recent")
	appendLog(t, e.path, criLine(2*time.Second, "stdout", "F", "new"))
	expect(t, r, "2026-01-02T03:04:07.000000000Z new")
	e.rt.setState("app-0", runtimeapi.ContainerState_CONTAINER_EXITED)
	expectEnd(t, r)
}

func TestFollowExitedContainerEnds(t *testing.T) {
	e := newFollowEnv(t, criLine(0, "stdout", "F", "done"))
	e.rt.setState("app-0", runtimeapi.ContainerState_CONTAINER_EXITED)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	r := e.open(t, ctx, "follow=true")
	expect(t, r, "done")
	expectEnd(t, r)
}

func TestFollowEndsWhenClientGoes(t *testing.T) {
	e := newFollowEnv(t, criLine(0, "stdout", "F", "a1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := e.open(t, ctx, "follow=true")
	expect(t, r, "a1")
	// The container keeps running: only the client's leaving can end this.
	cancel()
	select {
	case <-e.done:
	case <-time.After(patience):
		t.Fatal("the handler still streams after the client went away")
	}
}
