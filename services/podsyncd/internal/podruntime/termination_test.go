package podruntime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/volumes"
)

// criLog writes lines in the CRI log format (what runtime-shim writes).
func criLog(t *testing.T, path string, lines ...string) {
	t.Helper()
	var b strings.Builder
	for i, l := range lines {
		stream := "stdout"
		if i%2 == 1 {
			stream = "stderr"
		}
		fmt.Fprintf(&b, "2026-01-02T03:04:05.%09dZ %s F %s\n", i, stream, l)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTerminationMessage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o666); err != nil {
			t.Fatal(err)
		}
		return p
	}
	done := write("done", "DONE")
	empty := write("empty", "")
	big := write("big", strings.Repeat("a", 10)+strings.Repeat("b", MaxTerminationMessageBytes))
	logPath := filepath.Join(dir, "0.log")
	criLog(t, logPath, "first", "second")
	var many []string
	for i := range 100 {
		many = append(many, fmt.Sprintf("line-%03d", i))
	}
	manyLog := filepath.Join(dir, "many.log")
	criLog(t, manyLog, many...)
	var long []string
	for i := range 50 {
		long = append(long, fmt.Sprintf("%02d", i)+strings.Repeat("x", 98))
	}
	longLog := filepath.Join(dir, "long.log")
	criLog(t, longLog, long...)

	const path = "/dev/termination-log"
	status := func(hostPath string, policy corev1.TerminationMessagePolicy, exit int32, reason, log string) *runtimeapi.ContainerStatus {
		s := &runtimeapi.ContainerStatus{
			State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: exit, Reason: reason, LogPath: log,
			Annotations: map[string]string{AnnotationTermPath: path, AnnotationPolicy: string(policy)},
		}
		if hostPath != "" {
			s.Mounts = []*runtimeapi.Mount{{ContainerPath: "/etc/hosts", HostPath: done}, {ContainerPath: path, HostPath: hostPath}}
		}
		return s
	}
	tests := []struct {
		name string
		st   *runtimeapi.ContainerStatus
		want string
	}{
		{"file", status(done, corev1.TerminationMessageReadFile, 0, "Completed", logPath), "DONE"},
		{"file, failed, File policy ignores the log", status(empty, corev1.TerminationMessageReadFile, 1, "Error", logPath), ""},
		{"file wins over the log on failure", status(done, corev1.TerminationMessageFallbackToLogsOnError, 1, "Error", logPath), "DONE"},
		{"empty file, failed: log", status(empty, corev1.TerminationMessageFallbackToLogsOnError, 1, "Error", logPath), "first\nsecond\n"},
		{"empty file, succeeded: nothing", status(empty, corev1.TerminationMessageFallbackToLogsOnError, 0, "Completed", logPath), ""},
		{"no mount, failed: log", status("", corev1.TerminationMessageFallbackToLogsOnError, 2, "Error", logPath), "first\nsecond\n"},
		{"missing file, failed: log", status(filepath.Join(dir, "gone"), corev1.TerminationMessageFallbackToLogsOnError, 2, "Error", logPath), "first\nsecond\n"},
		{"never ran: no log", status(empty, corev1.TerminationMessageFallbackToLogsOnError, 128, reasonContainerCannotRun, logPath), ""},
		{"file keeps its last 4 KiB", status(big, corev1.TerminationMessageReadFile, 0, "Completed", logPath), strings.Repeat("b", MaxTerminationMessageBytes)},
		{"log keeps its last 80 lines", status(empty, corev1.TerminationMessageFallbackToLogsOnError, 1, "Error", manyLog), strings.Join(many[20:], "\n") + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := terminationMessage(context.Background(), tc.st); got != tc.want {
				t.Fatalf("message = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("log keeps its last 2 KiB", func(t *testing.T) {
		got := terminationMessage(context.Background(), status(empty, corev1.TerminationMessageFallbackToLogsOnError, 1, "Error", longLog))
		all := strings.Join(long, "\n") + "\n"
		if want := all[len(all)-MaxTerminationMessageLogBytes:]; got != want {
			t.Fatalf("message = %q (%d bytes), want the last %d bytes %q", got, len(got), MaxTerminationMessageLogBytes, want)
		}
	})
	t.Run("unreadable log is reported", func(t *testing.T) {
		got := terminationMessage(context.Background(), status(empty, corev1.TerminationMessageFallbackToLogsOnError, 1, "Error", filepath.Join(dir, "none.log")))
		if !strings.HasPrefix(got, "Error on reading termination message from logs: ") {
			t.Fatalf("message = %q", got)
		}
	})
}

func TestTerminationMessageMount(t *testing.T) {
	root := t.TempDir()
	vols := volumes.New(root, nil, nil)
	m := NewManager(nil, nil, Options{Volumes: vols})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "uid-1"}}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	c := &corev1.Container{Name: "main", TerminationMessagePath: "/dev/termination-custom-log"}
	first, err := m.terminationMessageMount(pod, c)
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.terminationMessageMount(pod, c)
	if err != nil {
		t.Fatal(err)
	}
	if first.ContainerPath != c.TerminationMessagePath {
		t.Errorf("container path = %q", first.ContainerPath)
	}
	if first.HostPath == second.HostPath {
		t.Errorf("two instances share %s", first.HostPath)
	}
	wantDir := filepath.Join(vols.PodDir(pod.UID), "containers", "main")
	if filepath.Dir(first.HostPath) != wantDir {
		t.Errorf("host path %s not under %s", first.HostPath, wantDir)
	}
	fi, err := os.Stat(first.HostPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o666 || fi.Size() != 0 {
		t.Errorf("file mode %v size %d, want 0666 and empty (any user writes it)", fi.Mode().Perm(), fi.Size())
	}

	none, err := m.terminationMessageMount(pod, &corev1.Container{Name: "quiet"})
	if err != nil || none != nil {
		t.Errorf("no terminationMessagePath: mount %v, err %v; want none", none, err)
	}
}
