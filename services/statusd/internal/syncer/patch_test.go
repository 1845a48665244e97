package syncer

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

func TestStatusPatch(t *testing.T) {
	old := &corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: "x", Status: corev1.ConditionTrue}}}
	same := old.DeepCopy()
	p, unchanged, err := StatusPatch("u1", old, same)
	if err != nil || !unchanged {
		t.Fatalf("identical statuses: unchanged=%v patch=%s err=%v", unchanged, p, err)
	}
	next := old.DeepCopy()
	next.Phase = corev1.PodRunning
	p, unchanged, err = StatusPatch("u1", old, next)
	if err != nil || unchanged {
		t.Fatalf("changed status: unchanged=%v err=%v", unchanged, err)
	}
	if !strings.Contains(string(p), `"uid":"u1"`) || !strings.Contains(string(p), `"phase":"Running"`) || strings.Contains(string(p), `"x"`) {
		t.Fatalf("patch %s", p)
	}
}

// runningStatus is a kubelet-like status of a three-container pod.
func runningStatus(rc int32) *corev1.PodStatus {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	st := &corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.1", PodIP: "10.1.0.5", PodIPs: []corev1.PodIP{{IP: "10.1.0.5"}}, StartTime: &now, QOSClass: corev1.PodQOSBestEffort}
	for _, c := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	for _, n := range []string{"a", "b", "c"} {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{Name: n, Image: "busybox", ImageID: "docker://sha", ContainerID: "docker://" + n, RestartCount: rc, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}})
	}
	return st
}

// jsonPatch is the reference: upstream's two-way merge patch over the JSON
// of whole pods, the way the kubelet builds its status patch.
func jsonPatch(t *testing.T, uid types.UID, old, next *corev1.PodStatus) []byte {
	t.Helper()
	o, err := json.Marshal(corev1.Pod{Status: *old})
	if err != nil {
		t.Fatal(err)
	}
	n, err := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: uid}, Status: *next})
	if err != nil {
		t.Fatal(err)
	}
	p, err := strategicpatch.CreateTwoWayMergePatch(o, n, corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

// TestStatusPatchMatchesJSONDiff checks the struct-level diff against the
// JSON one, and that the patch turns the old status into the new one.
func TestStatusPatchMatchesJSONDiff(t *testing.T) {
	terminated := runningStatus(1)
	terminated.Phase = corev1.PodFailed
	terminated.ContainerStatuses[1].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "ContainerStatusUnknown", Message: "gone"}}
	terminated.ContainerStatuses[1].Ready = false
	notReady := runningStatus(1)
	notReady.Conditions[2].Status, notReady.Conditions[2].Reason = corev1.ConditionFalse, "ContainersNotReady"
	foreign := runningStatus(1)
	foreign.Conditions = append(foreign.Conditions, corev1.PodCondition{Type: "example.com/gate", Status: corev1.ConditionTrue})
	dropped := runningStatus(1)
	dropped.Conditions = dropped.Conditions[:3]
	dropped.PodIPs, dropped.PodIP, dropped.StartTime = nil, "", nil
	for _, tc := range []struct {
		name      string
		old, next *corev1.PodStatus
	}{
		{"empty to running", &corev1.PodStatus{}, runningStatus(0)},
		{"restart count", runningStatus(1), runningStatus(2)},
		{"running to terminated", runningStatus(1), terminated},
		{"condition flips", runningStatus(1), notReady},
		{"condition added", runningStatus(1), foreign},
		{"fields and conditions removed", runningStatus(1), dropped},
		{"unchanged", runningStatus(3), runningStatus(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, unchanged, err := StatusPatch("u1", tc.old, tc.next)
			if err != nil {
				t.Fatal(err)
			}
			want := jsonPatch(t, "u1", tc.old, tc.next)
			if !reflect.DeepEqual(decode(t, got), decode(t, want)) {
				t.Fatalf("patch\n got %s\nwant %s", got, want)
			}
			if unchanged != (string(want) == `{"metadata":{"uid":"u1"}}`) {
				t.Fatalf("unchanged=%v for patch %s", unchanged, got)
			}
			oldJSON, _ := json.Marshal(corev1.Pod{Status: *tc.old})
			applied, err := strategicpatch.StrategicMergePatch(oldJSON, got, corev1.Pod{})
			if err != nil {
				t.Fatal(err)
			}
			var pod corev1.Pod
			if err := json.Unmarshal(applied, &pod); err != nil {
				t.Fatal(err)
			}
			nextJSON, _ := json.Marshal(tc.next)
			gotJSON, _ := json.Marshal(pod.Status)
			if string(nextJSON) != string(gotJSON) {
				t.Fatalf("applied\n got %s\nwant %s", gotJSON, nextJSON)
			}
		})
	}
}

func BenchmarkStatusPatch(b *testing.B) {
	old, next := runningStatus(1), runningStatus(2)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := StatusPatch("uid-1", old, next); err != nil {
			b.Fatal(err)
		}
	}
}
