package cache

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestObservedGeneration: SetPodStatus stamps the pod's generation on the
// status, as the kubelet's status manager does; a status computed from an
// older spec never lowers it; a condition's observed generation alone is a
// change worth a new version.
func TestObservedGeneration(t *testing.T) {
	c := New(openStore(t, filepath.Join(t.TempDir(), "s.db")))
	p := pod("g")
	p.Generation = 3
	withConditions := func(gen int64) *corev1.PodStatus {
		st := status(runningState, false)
		st.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, ObservedGeneration: gen}}
		return st
	}
	v1, err := c.SetPodStatus(p, withConditions(3))
	if err != nil {
		t.Fatal(err)
	}
	e, _ := c.Get(string(p.UID))
	if e.Status.ObservedGeneration != 3 {
		t.Fatalf("observedGeneration = %d, want 3", e.Status.ObservedGeneration)
	}

	stale := p.DeepCopy()
	stale.Generation = 2
	if _, err := c.SetPodStatus(stale, withConditions(3)); err != nil {
		t.Fatal(err)
	}
	if e, _ := c.Get(string(p.UID)); e.Status.ObservedGeneration != 3 || e.Version != v1 {
		t.Fatalf("an older spec's status changed the entry: generation %d version %d", e.Status.ObservedGeneration, e.Version)
	}

	p.Generation = 4
	v2, err := c.SetPodStatus(p, withConditions(4))
	if err != nil {
		t.Fatal(err)
	}
	e, _ = c.Get(string(p.UID))
	if v2 == v1 || e.Status.ObservedGeneration != 4 || e.Status.Conditions[0].ObservedGeneration != 4 {
		t.Fatalf("new generation: version %d→%d, status %d, condition %d", v1, v2, e.Status.ObservedGeneration, e.Status.Conditions[0].ObservedGeneration)
	}
}
