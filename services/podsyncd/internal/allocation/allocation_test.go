package allocation

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/statefile/statefiletest"
)

func reqs(cpu, mem string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
	}
}

func testPod(cpu, mem string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{UID: "u1", Name: "p", Namespace: "ns", Generation: 1},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "init", Resources: reqs("10m", "10Mi")}},
			Containers:     []corev1.Container{{Name: "a", Resources: reqs(cpu, mem)}, {Name: "b", Resources: reqs("100m", "10Mi")}},
		},
	}
}

func TestCheckpointSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod("100m", "20Mi")
	if err := s.SetAllocated(pod); err != nil {
		t.Fatal(err)
	}
	if err := s.SetActuated(pod.UID, "a", reqs("100m", "20Mi")); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	resized := testPod("500m", "64Mi")
	got, changed := again.PodFromAllocation(resized)
	if !changed || got.Spec.Containers[0].Resources.Requests.Cpu().String() != "100m" || got.Spec.InitContainers[0].Resources.Requests.Cpu().String() != "10m" {
		t.Fatalf("allocation after reopen: changed=%v %+v", changed, got.Spec.Containers[0].Resources)
	}
	if resized.Spec.Containers[0].Resources.Requests.Cpu().String() != "500m" {
		t.Fatal("PodFromAllocation modified its input")
	}
	if act, ok := again.Actuated(pod.UID, "a"); !ok || act.Limits.Memory().String() != "20Mi" {
		t.Fatalf("actuated after reopen: %v %+v", ok, act)
	}
	if err := again.RemoveOrphans(map[types.UID]bool{}); err != nil {
		t.Fatal(err)
	}
	third, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := third.Allocated(pod.UID); ok {
		t.Fatal("orphan kept after RemoveOrphans")
	}

}

// A garbled or truncated checkpoint (a power loss, a bad disk) does not stop
// podsyncd: it is moved aside with a Warning naming both paths, the state
// starts empty, and the next checkpoint is written fresh.
func TestCorruptCheckpointQuarantined(t *testing.T) {
	for name, content := range map[string]string{
		"garbled":       "{broken",
		"truncated":     `{"version":1,"allocated":{"u1":{"containers":{"a":{"requests":{"cpu":"1`,
		"other version": `{"version":7,"allocated":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, CheckpointFile)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			s, err := Open(dir, slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatalf("Open with a %s checkpoint: %v", name, err)
			}
			pod := testPod("100m", "20Mi")
			if _, ok := s.Allocated(pod.UID); ok {
				t.Fatal("state not empty after quarantine")
			}
			statefiletest.MovedAside(t, path, statefiletest.Want{Content: []byte(content), Log: &logs})
			if err := s.SetAllocated(pod); err != nil {
				t.Fatal(err)
			}
			again, err := Open(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := again.Allocated(pod.UID); !ok {
				t.Fatal("new checkpoint not written after quarantine")
			}
		})
	}
}

func TestHandleResize(t *testing.T) {
	s, _ := Open("", nil)
	pod := testPod("100m", "20Mi")
	if err := s.SetAllocated(pod); err != nil {
		t.Fatal(err)
	}
	refuse := func(*corev1.Pod) (bool, string, string) {
		return false, "OutOfcpu", "Node didn't have enough resource: cpu, requested: 600, used: 1800, capacity: 2000"
	}
	admit := func(*corev1.Pod) (bool, string, string) { return true, "", "" }

	// No change: nothing, and no condition.
	if out, _ := s.HandleResize(pod, refuse); out != (Outcome{}) || len(s.Conditions(pod.UID)) != 0 {
		t.Fatalf("unchanged pod: %+v %v", out, s.Conditions(pod.UID))
	}

	// Does not fit: Deferred with the admission's message, allocation kept.
	resized := testPod("600m", "20Mi")
	resized.Generation = 2
	out, _ := s.HandleResize(resized, refuse)
	if !out.Pending || !out.Changed || out.Reason != corev1.PodReasonDeferred {
		t.Fatalf("refused resize: %+v", out)
	}
	if c := s.Pending(pod.UID); c == nil || c.Reason != corev1.PodReasonDeferred || c.ObservedGeneration != 2 || c.Status != corev1.ConditionTrue {
		t.Fatalf("pending condition %+v", c)
	}
	if out, _ := s.HandleResize(resized, refuse); !out.Pending || out.Changed {
		t.Fatalf("same refusal again: %+v, want pending and unchanged", out)
	}
	if a, _ := s.Allocated(pod.UID); cpuOf(a) != "100m" {
		t.Fatal("a refused resize changed the allocation")
	}

	// Pod-level resources: Infeasible whatever the admitter says.
	plr := resized.DeepCopy()
	plr.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
	if out, _ := s.HandleResize(plr, admit); !out.Pending || out.Reason != corev1.PodReasonInfeasible || out.Message != podLevelInfeasible {
		t.Fatalf("pod-level resize: %+v", out)
	}

	// Fits: allocated, pending gone, in progress at the pod's generation.
	out, _ = s.HandleResize(resized, admit)
	if !out.Allocated {
		t.Fatalf("admitted resize: %+v", out)
	}
	conds := s.Conditions(pod.UID)
	if len(conds) != 1 || conds[0].Type != corev1.PodResizeInProgress || conds[0].ObservedGeneration != 2 || conds[0].Reason != "" {
		t.Fatalf("conditions after allocation: %+v", conds)
	}
	if a, _ := s.Allocated(pod.UID); cpuOf(a) != "600m" {
		t.Fatal("allocation not updated")
	}

	// A reverted spec clears a pending condition.
	s.SetPending(pod.UID, "OutOfcpu", "x", 3)
	if _, _ = s.HandleResize(resized, refuse); s.Pending(pod.UID) != nil {
		t.Fatal("pending kept for a spec equal to the allocation")
	}
}

func TestInProgressConditions(t *testing.T) {
	s, _ := Open("", nil)
	pod := testPod("200m", "20Mi")
	_ = s.SetAllocated(pod)
	running := func(name string) bool { return name != "b" && name != "init" }
	_ = s.SetActuated(pod.UID, "a", reqs("100m", "20Mi"))
	if !s.InProgress(pod, running) {
		t.Fatal("actuated 100m, allocated 200m: not in progress")
	}
	_ = s.SetActuated(pod.UID, "a", reqs("200m", "20Mi"))
	if s.InProgress(pod, running) {
		t.Fatal("actuated equals allocated (b not running): in progress")
	}
	// Zero-valued entries (as the kubelet records an update) equal absent ones.
	withZeros := reqs("200m", "20Mi")
	withZeros.Limits[corev1.ResourceEphemeralStorage] = resource.MustParse("0")
	_ = s.SetActuated(pod.UID, "a", withZeros)
	if s.InProgress(pod, running) {
		t.Fatal("a zero quantity counted as a difference")
	}

	// SetInProgress keeps generation and reason; Error replaces the reason.
	if gen, changed := s.SetInProgress(pod.UID, "", "", 4); gen != 4 || !changed {
		t.Fatalf("new in-progress: %d %v", gen, changed)
	}
	if gen, changed := s.SetInProgress(pod.UID, "", "", 5); gen != 4 || changed {
		t.Fatalf("again: %d %v, want generation kept and unchanged", gen, changed)
	}
	if _, changed := s.SetInProgress(pod.UID, corev1.PodReasonError, "boom", 5); !changed {
		t.Fatal("error reason not a change")
	}
	if gen, cleared := s.ClearInProgress(pod.UID); gen != 4 || !cleared {
		t.Fatalf("clear: %d %v", gen, cleared)
	}
	if _, cleared := s.ClearInProgress(pod.UID); cleared {
		t.Fatal("cleared twice")
	}

	// Backfill takes the API's conditions once.
	api := pod.DeepCopy()
	api.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonDeferred, Message: "m", ObservedGeneration: 7}}
	s.Backfill(api)
	if c := s.Pending(pod.UID); c == nil || c.ObservedGeneration != 7 || c.Message != "m" {
		t.Fatalf("backfilled %+v", c)
	}
	s.ClearPending(pod.UID)
	s.Backfill(api)
	if s.Pending(pod.UID) != nil {
		t.Fatal("backfilled twice")
	}
}

func cpuOf(a PodResources) string {
	q := a.Containers["a"].Requests[corev1.ResourceCPU]
	return q.String()
}
