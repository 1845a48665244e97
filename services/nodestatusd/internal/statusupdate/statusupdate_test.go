package statusupdate

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStatusChangedIgnoresHeartbeats(t *testing.T) {
	t0, t1 := metav1.NewTime(time.Unix(1, 0)), metav1.NewTime(time.Unix(2, 0))
	a := &corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: t0}}}
	b := a.DeepCopy()
	b.Conditions[0].LastHeartbeatTime = t1
	if StatusChanged(a, b) {
		t.Fatal("heartbeat alone counted as a change")
	}
	b.Conditions[0].Status = corev1.ConditionFalse
	if !StatusChanged(a, b) {
		t.Fatal("status change missed")
	}
	c := a.DeepCopy()
	c.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}
	if !StatusChanged(a, c) {
		t.Fatal("address change missed")
	}
	d := a.DeepCopy()
	d.Conditions = append(d.Conditions, corev1.NodeCondition{Type: "X"})
	if !StatusChanged(a, d) {
		t.Fatal("new condition missed")
	}
}
