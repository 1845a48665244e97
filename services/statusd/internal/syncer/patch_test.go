package syncer

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
