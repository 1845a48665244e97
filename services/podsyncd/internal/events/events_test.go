package events

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
)

func testPod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers:     []corev1.Container{{Name: "main"}},
	}}
}

func TestContainerRef(t *testing.T) {
	pod := testPod()
	for name, want := range map[string]string{
		"main":  "spec.containers{main}",
		"init":  "spec.initContainers{init}",
		"other": "implicitly required container other",
	} {
		ref := ContainerRef(pod, &corev1.Container{Name: name})
		if ref.FieldPath != want || ref.Kind != "Pod" || ref.UID != "u1" || ref.Namespace != "ns" {
			t.Errorf("%s: %+v", name, ref)
		}
	}
}

func TestLogRecorder(t *testing.T) {
	var buf bytes.Buffer
	rec := NewLog(slog.New(slog.NewTextHandler(&buf, nil)))
	rec.Eventf(ContainerRef(testPod(), &corev1.Container{Name: "main"}), corev1.EventTypeWarning, Unhealthy, "%s probe failed: %s", "Liveness", "boom")
	out := buf.String()
	for _, want := range []string{"level=WARN", `msg="event: Liveness probe failed: boom"`, "reason=Unhealthy", "object=Pod/ns/p", "field=spec.containers{main}"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}

// The broadcaster posts an Event with the kubelet's source (a narrow check
// of the wiring; the e2e test proves it against a real API server).
func TestNewPostsEvents(t *testing.T) {
	client := fake.NewClientset()
	rec, stop := New(client, "node-1", Component, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
	defer stop()
	rec.Event(ContainerRef(testPod(), &corev1.Container{Name: "main"}), corev1.EventTypeNormal, Started, "Container started")
	testenv.Eventually(t, "event posted", 30*time.Second, func() error {
		list, err := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d events", len(list.Items))
		}
		e := list.Items[0]
		if e.Source.Component != "kubelet" || e.Source.Host != "node-1" || e.Reason != Started || e.InvolvedObject.FieldPath != "spec.containers{main}" {
			t.Fatalf("event %+v", e)
		}
		return nil
	})
}

// A warning repeated every second for a pod (a sync loop retrying) is
// logged at counts 1, 2, 4, 8 and 16 and then dropped by the spam filter
// (burst 25 per object), as the kubelet's recorder would post it; another
// pod's event is still logged.
func TestLogRecorderCorrelatesRepeats(t *testing.T) {
	var buf bytes.Buffer
	clk := testingclock.NewFakeClock(time.Now())
	rec := newLogRecorder(slog.New(slog.NewTextHandler(&buf, nil)), record.CorrelatorOptions{Clock: clk})
	pod := testPod()
	for range 100 {
		rec.Event(pod, corev1.EventTypeWarning, MissingClusterDNS, "no cluster DNS")
		clk.Step(time.Second)
	}
	other := testPod()
	other.Name, other.UID = "q", "u2"
	rec.Event(other, corev1.EventTypeWarning, MissingClusterDNS, "no cluster DNS")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d log lines, want 6:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"", "count=2", "count=4", "count=8", "count=16"} {
		if !strings.Contains(lines[i], "object=Pod/ns/p") || (want != "" && !strings.HasSuffix(lines[i], want)) || (want == "" && strings.Contains(lines[i], "count=")) {
			t.Errorf("line %d %q, want pod p with %q", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[5], "object=Pod/ns/q") {
		t.Errorf("last line %q, want pod q's event", lines[5])
	}
}
