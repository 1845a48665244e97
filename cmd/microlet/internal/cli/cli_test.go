package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
)

func pod(name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)}}
}

func update(t *testing.T, op podconfigv1.Operation, src string, pods ...*corev1.Pod) *podconfigv1.PodUpdate {
	t.Helper()
	u := &podconfigv1.PodUpdate{Op: op, Source: src}
	for _, p := range pods {
		b, err := p.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		u.Pods = append(u.Pods, b)
	}
	return u
}

func summary(changes []podChange) []string {
	var out []string
	for _, c := range changes {
		out = append(out, c.Type+" "+c.Source+"/"+c.Pod.Name)
	}
	slices.Sort(out)
	return out
}

// TestApplyWatch follows a watch through podconfig's operations.
func TestApplyWatch(t *testing.T) {
	a, b, c := pod("a", "1"), pod("b", "2"), pod("c", "3")
	steps := []struct {
		name string
		resp *podconfigv1.WatchResponse
		want []string
	}{
		{"snapshot", &podconfigv1.WatchResponse{Resync: true, Updates: []*podconfigv1.PodUpdate{
			update(t, podconfigv1.Operation_OPERATION_SET, "file", a, b),
			update(t, podconfigv1.Operation_OPERATION_SET, "api"),
		}}, []string{"ADDED file/a", "ADDED file/b"}},
		{"add", &podconfigv1.WatchResponse{Updates: []*podconfigv1.PodUpdate{
			update(t, podconfigv1.Operation_OPERATION_ADD, "api", c),
		}}, []string{"ADDED api/c"}},
		{"update and reconcile", &podconfigv1.WatchResponse{Updates: []*podconfigv1.PodUpdate{
			update(t, podconfigv1.Operation_OPERATION_UPDATE, "file", a),
			update(t, podconfigv1.Operation_OPERATION_RECONCILE, "api", c),
		}}, []string{"MODIFIED api/c", "MODIFIED file/a"}},
		{"remove", &podconfigv1.WatchResponse{Updates: []*podconfigv1.PodUpdate{
			update(t, podconfigv1.Operation_OPERATION_REMOVE, "file", b),
		}}, []string{"DELETED file/b"}},
		{"set drops the missing", &podconfigv1.WatchResponse{Updates: []*podconfigv1.PodUpdate{
			update(t, podconfigv1.Operation_OPERATION_SET, "file", b),
		}}, []string{"ADDED file/b", "DELETED file/a"}},
		{"resync compares with what was known", &podconfigv1.WatchResponse{Resync: true, Updates: []*podconfigv1.PodUpdate{
			update(t, podconfigv1.Operation_OPERATION_SET, "file", b, a),
		}}, []string{"ADDED file/a", "DELETED api/c", "MODIFIED file/b"}},
	}
	var known map[string]map[string]*corev1.Pod
	for _, st := range steps {
		var changes []podChange
		changes, known = applyWatch(known, st.resp, io.Discard)
		if got := summary(changes); !slices.Equal(got, st.want) {
			t.Errorf("%s: changes %v, want %v", st.name, got, st.want)
		}
	}
}

func TestPrintPodRow(t *testing.T) {
	p := pod("web", "u1")
	p.Spec.Containers = []corev1.Container{{Name: "a"}, {Name: "b"}}
	start := metav1.NewTime(time.Now().Add(-30 * time.Minute))
	p.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &start,
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "a", Ready: true, RestartCount: 2},
			{Name: "b", Ready: false, RestartCount: 1},
		},
	}
	var buf bytes.Buffer
	printPodRow(&buf, podRow{pod: p, source: "file"})
	want := "default\tweb\tu1\tfile\tRunning\t1/2\t3\t30m\n"
	if buf.String() != want {
		t.Errorf("row %q, want %q", buf.String(), want)
	}
}

func TestHealthTarget(t *testing.T) {
	tests := []struct {
		arg, want, err string
	}{
		{arg: "podconfig", want: "unix:///r/podconfig.sock"},
		{arg: "runtime-shim", want: "unix:///r/runtime.sock"},
		{arg: "microlet", want: "unix:///r/microlet.sock"},
		{arg: "unix:///x/y.sock", want: "unix:///x/y.sock"},
		{arg: "/x/y.sock", want: "unix:///x/y.sock"},
		{arg: "kubelet", err: `unknown service "kubelet"`},
		{arg: "tcp://1.2.3.4:5", err: "only unix://"},
	}
	for _, tc := range tests {
		got, err := healthTarget("/r", tc.arg)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("healthTarget(%q) error %v, want %q", tc.arg, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("healthTarget(%q) = %q, %v; want %q", tc.arg, got, err, tc.want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	if c := exitCode(failure("down")); c != 1 {
		t.Errorf("failure -> %d", c)
	}
	if c := exitCode(badUsage(errors.New("bad"))); c != 2 {
		t.Errorf("badUsage -> %d", c)
	}
	if c := exitCode(errors.New(`unknown command "x"`)); c != 2 {
		t.Errorf("cobra error -> %d", c)
	}
	var out, errOut bytes.Buffer
	if c := Execute([]string{"status", "extra"}, &out, &errOut); c != 2 || !strings.HasPrefix(errOut.String(), "microlet: ") || strings.Count(errOut.String(), "\n") != 1 {
		t.Errorf("Execute(status extra) = %d, stderr %q", c, errOut.String())
	}
}

// MICROLET_RUN_DIR is the inspecting subcommands' default --run-dir, so they
// find a `microlet run --run-dir` elsewhere (make run's /tmp/microlet-run).
func TestRunDirFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(RunDirEnv, dir)
	for _, args := range [][]string{{"status"}, {"get", "pods", "--timeout", "1s"}} {
		var out, errOut bytes.Buffer
		Execute(args, &out, &errOut)
		if !strings.Contains(out.String()+errOut.String(), filepath.Join(dir, "podconfig.sock")) {
			t.Errorf("%v looked elsewhere than %s: %q %q", args, dir, out.String(), errOut.String())
		}
	}
}

// TestStatusWide: -o wide measures each row's process from /proc (here this
// test process twice, and a pid that does not exist) and sums them; with a
// sample window CPU is in cores.
func TestStatusWide(t *testing.T) {
	rep := &statusReport{Components: []statusRow{
		{Name: "a", Health: "SERVING", PID: os.Getpid(), Restarts: 0},
		{Name: "b", Health: "SERVING", PID: os.Getpid(), Restarts: 0},
		{Name: "gone", Health: "DOWN", PID: 1 << 30, Restarts: 0},
	}}
	if err := measure(context.Background(), rep, t.TempDir(), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	a, gone := rep.Components[0], rep.Components[2]
	if a.RSSBytes < 1<<20 || a.PSSBytes == 0 || a.CPUSeconds <= 0 && a.CPUCores < 0 {
		t.Fatalf("row a = %+v", a)
	}
	if gone.RSSBytes != 0 || gone.PSSBytes != 0 {
		t.Fatalf("a missing process was measured: %+v", gone)
	}
	if rep.Total == nil || rep.Total.RSSBytes < 2*a.RSSBytes-(1<<20) || rep.SampleSeconds < 0.05 {
		t.Fatalf("total %+v over %.3fs", rep.Total, rep.SampleSeconds)
	}
	var out bytes.Buffer
	printStatus(&out, rep, true)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], "CPU(cores)") || !strings.Contains(lines[0], "PSS(MiB)") ||
		!strings.HasPrefix(lines[4], "TOTAL") || !regexp.MustCompile(`^gone\s+DOWN\s+\d+\s+0\s+-\s+-\s+-\s+-`).MatchString(lines[3]) {
		t.Fatalf("wide table:\n%s", out.String())
	}
}

// TestNodeReady: get node's STATUS column is the Ready condition's status
// (Unknown when it is missing or Unknown), with SchedulingDisabled added
// for a cordoned node, as kubectl prints it.
func TestNodeReady(t *testing.T) {
	node := func(unschedulable bool, conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: unschedulable}, Status: corev1.NodeStatus{Conditions: conds}}
	}
	ready := func(s corev1.ConditionStatus) corev1.NodeCondition {
		return corev1.NodeCondition{Type: corev1.NodeReady, Status: s}
	}
	pressure := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{
		{node(false), "Unknown"},
		{node(false, pressure), "Unknown"},
		{node(false, pressure, ready(corev1.ConditionTrue)), "Ready"},
		{node(false, ready(corev1.ConditionFalse), pressure), "NotReady"},
		{node(false, ready(corev1.ConditionUnknown)), "Unknown"},
		{node(true, ready(corev1.ConditionTrue)), "Ready,SchedulingDisabled"},
		{node(true), "Unknown,SchedulingDisabled"},
	} {
		if got := nodeReady(tc.node); got != tc.want {
			t.Errorf("nodeReady(%v, unschedulable=%v) = %q, want %q", tc.node.Status.Conditions, tc.node.Spec.Unschedulable, got, tc.want)
		}
	}
}
